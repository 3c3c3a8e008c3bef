"""The leases one worker process holds: every :class:`~antre.runs.Run` from its claim until its
settle call returns (running, or waiting for its ack). The heartbeat extends what is listed
here and reports back what it found lost."""

from __future__ import annotations

from collections.abc import Iterator

from antre.outcomes import Outcomes
from antre.protocol.scripts import Lease
from antre.runs import Run


class HeldRuns:
    def __init__(self, outcomes: Outcomes) -> None:
        self.outcomes = outcomes
        self._runs: dict[str, Run] = {}

    def __len__(self) -> int:
        return len(self._runs)

    def __iter__(self) -> Iterator[Run]:
        return iter(list(self._runs.values()))

    def add(self, run: Run) -> None:
        previous = self._runs.get(run.claimed.id)
        if previous is not None:  # a newer lease of a job we still run: the old run is lost
            self.lose(run.claimed.id, previous.claimed.lease, "re-claimed under a newer lease")
        self._runs[run.claimed.id] = run

    def forget(self, run: Run) -> None:
        """The run's settle call returned: the lease is no longer this worker's to keep."""
        if self._runs.get(run.claimed.id) is run:
            del self._runs[run.claimed.id]

    def leases(self) -> list[Lease]:
        """The leases the heartbeat extends: runs neither lost nor given back."""
        return [run.lease for run in self._runs.values() if not run.lost and not run.released]

    def lose(self, job_id: str, lease: int, reason: str = "heartbeat found the lease gone") -> None:
        """The lease ``(job_id, lease)`` is gone: its run's result must be discarded."""
        run = self._runs.get(job_id)
        # Only the run holding that very lease; a settling run's ack or fail call is in flight
        # and its reply decides the outcome.
        if (run is None or run.claimed.lease != lease or run.lost or run.released
                or run.settling):
            return
        run.lost = True
        # An async handler stops at its next await. A thread cannot be stopped: its task keeps
        # the slot until the thread returns, and what it returns is discarded.
        if run.cancellable and run.task is not None and not run.task.done():
            run.task.cancel()
        del self._runs[job_id]
        self.outcomes.record(run, "lease_lost", error=reason)
