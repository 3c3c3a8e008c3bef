"""The leases one worker process holds: every :class:`~antre.runs.Run` from its claim until its
settle call returns (running, or waiting for its ack).

The heartbeat extends what is listed here and reports back what it renewed and what it found
lost. A lease is a timeout: a run whose lease was not renewed in time (Redis unreachable) stops
being treated as held at its own deadline, measured on this process's monotonic clock from the
send of the last renewal that succeeded, less a margin. Its async handler is cancelled, and its
result, like a thread's, is never acknowledged: by then the lease may have expired in Redis and
the job, or its resource, may belong to another run.

A run can reach its deadline while a renewal of its lease is on its way, and that renewal may
have reached Redis in time: its reply was only late (a stalled link, a GC pause, a CPU-starved
pod). Such a run is abandoned at its deadline all the same, but its outcome waits for the
renewal's answer (:meth:`HeldRuns.renewal_answered`): a lease Redis answers held, while the
lease that renewal set can be trusted, is still this worker's, with nobody running its job, so
the heartbeat has it given back (:mod:`antre.late_renewals`); any other answer, or none, makes
it ``lease_lost``.
"""

from __future__ import annotations

import asyncio
from collections.abc import Collection, Iterator, Sequence

from antre.outcomes import Outcomes
from antre.protocol.scripts import Lease
from antre.runs import Run

#: Part of a lease kept back from the local deadline (at least 100 ms): time to stop the run
#: before Redis could hand the job or its resource to another.
DEADLINE_MARGIN = 0.1
#: Why a run whose lease was not renewed by its deadline was abandoned.
DEADLINE_REASON = "lease not renewed before its deadline (Redis unreachable?); run abandoned"


def held_after_abandon(renewed: Sequence[Run], held: Sequence[bool],
                       abandoned: Collection[Run]) -> list[Run]:
    """The runs to give back: of the runs a renewal extended (``held``: Redis's answer for
    each), those abandoned at their deadline while it was on its way. Their lease is held in
    Redis and nobody runs their job. A run that was settling, or lost its lease otherwise (a
    newer lease of its job claimed, Redis found it gone), is never among ``abandoned``; a newer
    lease of the same job is another run."""
    return [run for run, kept in zip(renewed, held, strict=True) if kept and run in abandoned]


class HeldRuns:
    def __init__(self, outcomes: Outcomes, *, lease_s: float) -> None:
        self.outcomes = outcomes
        #: How long a renewal (or the claim) keeps a lease, less the margin.
        self.trusted_s = lease_s - max(lease_s * DEADLINE_MARGIN, 0.1)
        self._runs: dict[str, Run] = {}
        # One timer, at the earliest deadline of the runs held; it holds no run, so a settled
        # run is garbage at once.
        self._timer: asyncio.TimerHandle | None = None
        #: The runs the renewal on its way extends (the heartbeat sends one at a time).
        self._renewing: set[Run] = set()
        #: Runs abandoned at their deadline while that renewal was on its way: their outcome
        #: is recorded once it is answered.
        self._abandoned: list[Run] = []

    def __len__(self) -> int:
        return len(self._runs)

    def __iter__(self) -> Iterator[Run]:
        return iter(list(self._runs.values()))

    def add(self, runs: Sequence[Run], *, claim_sent_at: float) -> None:
        """Newly claimed runs; ``claim_sent_at`` (monotonic) is when the claim call was sent."""
        expires_at = claim_sent_at + self.trusted_s
        for run in runs:
            previous = self._runs.get(run.claimed.id)
            if previous is not None:  # a newer lease of a job we still run: the old run is lost
                self.lose(run.claimed.id, previous.claimed.lease, "re-claimed under a newer lease")
            self._runs[run.claimed.id] = run
            run.expires_at = expires_at
        if runs:
            self._wake_at(expires_at)

    def renewed(self, leases: Sequence[Lease], *, sent_at: float) -> None:
        """The heartbeat sent at ``sent_at`` (monotonic) extended ``leases``."""
        expires_at = sent_at + self.trusted_s
        for job_id, token in leases:
            run = self._runs.get(job_id)
            if run is not None and run.claimed.lease == token:
                run.expires_at = max(run.expires_at, expires_at)
        if leases:
            self._wake_at(expires_at)

    def forget(self, run: Run) -> None:
        """The run's settle call returned: the lease is no longer this worker's to keep."""
        if self._runs.get(run.claimed.id) is run:
            del self._runs[run.claimed.id]

    def renewing(self) -> list[Run]:
        """The runs whose leases the heartbeat is about to extend: runs not lost. A run being
        given back is one of them until its release lands (it is forgotten then): a stop gives
        cancelled handlers a second before it releases them, and a lease left to run out
        meanwhile frees the job and its resource lock beside a handler still going. Until
        :meth:`renewal_answered`, one of them reaching its deadline is abandoned with its
        outcome left to the answer."""
        runs = [run for run in self._runs.values() if not run.lost]
        self._renewing = set(runs)
        return runs

    def renewal_answered(self, runs: Sequence[Run], held: Sequence[bool] | None, *,
                         sent_at: float) -> list[Run]:
        """The renewal of ``runs`` (from :meth:`renewing`), sent at ``sent_at`` (monotonic),
        was answered: ``held``, what Redis holds of each, or None when the call failed. Returns
        the runs to give back (see :func:`held_after_abandon`); the other runs abandoned
        meanwhile lost their lease."""
        abandoned, self._abandoned = self._abandoned, []
        self._renewing = set()
        # An answer that comes once the lease it set can no longer be trusted (the process
        # was frozen or starved that long) gives nothing back: the lease may have expired, the
        # job been requeued, and a release would only stand in for the reaper.
        in_time = asyncio.get_running_loop().time() < sent_at + self.trusted_s
        given_back = held_after_abandon(runs, held, abandoned) if held is not None and in_time else []
        for run in abandoned:
            if run not in given_back:
                self.outcomes.record(run, "lease_lost", error=DEADLINE_REASON)
        return given_back

    def lose(self, job_id: str, lease: int, reason: str = "heartbeat found the lease gone") -> None:
        """The lease ``(job_id, lease)`` is gone: its run's result must be discarded."""
        run = self._abandon(job_id, lease)
        if run is not None:
            self.outcomes.record(run, "lease_lost", error=reason)

    def _abandon(self, job_id: str, lease: int) -> Run | None:
        """Stops treating the run of lease ``(job_id, lease)`` as held; returns it, or None
        when no run held that lease (or its outcome is decided elsewhere)."""
        run = self._runs.get(job_id)
        # Only the run holding that very lease; a settling run's ack or fail call is in flight
        # and its reply decides the outcome.
        if (run is None or run.claimed.lease != lease or run.lost or run.released
                or run.settling):
            return None
        run.lost = True
        # An async handler stops at its next await. A thread cannot be stopped: its task keeps
        # the slot until the thread returns, and what it returns is discarded.
        if run.cancellable and run.task is not None and not run.task.done():
            run.task.cancel()
        self.forget(run)
        return run

    def _wake_at(self, when: float) -> None:
        if self._timer is None or when < self._timer.when():
            if self._timer is not None:
                self._timer.cancel()
            self._timer = asyncio.get_running_loop().call_at(when, self._check_deadlines)

    def _check_deadlines(self) -> None:
        """Abandons the runs whose deadline passed; sleeps until the next one."""
        self._timer = None
        # The loop runs a timer up to its clock resolution early.
        now = asyncio.get_running_loop().time() + 0.001
        upcoming = [run.expires_at for run in self._runs.values()
                    if not run.settling and run.expires_at > now]
        for run in [run for run in self._runs.values() if run.expires_at <= now]:
            if run not in self._renewing:
                self.lose(run.claimed.id, run.claimed.lease, DEADLINE_REASON)
            elif self._abandon(run.claimed.id, run.claimed.lease) is not None:
                self._abandoned.append(run)
        if upcoming:
            self._wake_at(min(upcoming))
