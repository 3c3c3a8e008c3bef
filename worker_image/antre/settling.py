"""Settling runs that did not succeed: fail (retry or dead), release at shutdown, hand back
prefetched runs the work outgrew, give back a claim that came too late, and free the lock a
returning thread kept. Successes go through the ack batcher (:mod:`antre.ack_batcher`) instead.

Hand-backs are counted as ``handed_back``, apart from ``released``: they are routine, and
``released`` tells operators that a shutdown cut work short. A claim given back stays
``released``: it is rare and says something went wrong (Redis stalled, replicas lagged) or is
part of a stop, which is what that counter is watched for."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Collection, Sequence
from typing import Any, Final

from antre.backoff import Backoff
from antre.errors import LeaseLost, RedisUnavailable
from antre.failures import Failure
from antre.handler_threads import HandlerThreads
from antre.held_runs import HeldRuns
from antre.jobs import ClaimedJob
from antre.outages import Outages
from antre.outcomes import Outcomes
from antre.protocol import scripts
from antre.protocol.extend_lease import KeptLock
from antre.protocol.fail import fail_op
from antre.protocol.release import ReleaseEvent, ReleaseOutcome, release_op
from antre.protocol.unlock import unlock_op
from antre.runs import Run
from antre.settings import QueueSettings, WorkerSettings

log = logging.getLogger("antre.worker")
#: The history's reason for prefetched jobs a worker handed back unstarted (the work outgrew
#: its buffer), beside their event ``handed_back``.
HAND_BACK_REASON: Final = "prefetched, handed back unstarted"

#: Seconds a shutdown's release keeps retrying through an outage, all its calls together.
RELEASE_BUDGET_S = 5.0


class Settler:
    def __init__(self, redis: Any, queue: QueueSettings, settings: WorkerSettings, *,
                 worker_id: str, outages: Outages, outcomes: Outcomes, held: HeldRuns,
                 threads: HandlerThreads) -> None:
        self.redis = redis
        self.queue = queue
        self.settings = settings
        self.worker_id = worker_id
        self.outages = outages
        self.outcomes = outcomes
        self.held = held
        self.threads = threads
        self._unlocks: set[asyncio.Future[Any]] = set()
        #: Runs settled keeping their lock while their handler goes on on the loop, until it ends.
        self._going_on_loop: set[Run] = set()

    async def fail(self, run: Run, failure: Failure, backoff: Backoff) -> None:
        """Retries the job (after ``failure.delay_s``, else ``backoff``) or dead-letters it."""
        if failure.permanent:
            delay_ms = None
        elif failure.delay_s is not None:
            delay_ms = int(failure.delay_s * 1000)
        else:
            delay_ms = backoff.delay_ms(run.claimed.attempt)
        try:
            result = await self.outages.settle(fail_op(
                self.queue, run.lease, error=failure.error, retry_delay_ms=delay_ms,
                worker_id=self.worker_id, keep_lock=failure.keep_lock,
                refund_attempt=failure.refund_attempt), budget_s=self.settings.visibility_timeout_s)
        except (LeaseLost, RedisUnavailable):
            if failure.keep_lock:
                # The call may have run with its reply lost: given up on (RedisUnavailable), or
                # refused when sent again because something else changed the record since (an
                # operator's cancel). Redis may then hold the lock as kept for this thread, and
                # untracked it would expire while the thread runs. Tracked, it is harmless if
                # it was not kept: the heartbeat extends it only while it is still this run's,
                # takes it back only while the record's lock_kept names this lease, and the
                # thread's unlock frees it only if it is still this run's.
                self.threads.keep_lock(run)
            self.outcomes.record(run, "lease_lost", error=failure.error)
        else:
            if failure.keep_lock:
                self.threads.keep_lock(run)
            outcome = "retried" if result.outcome == "retrying" else "dead"
            self.outcomes.record(run, outcome, error=failure.error, level=logging.WARNING)
        finally:
            self.held.forget(run)

    async def release(self, runs: Sequence[Run], *, still_going: Collection[Run],
                      unstarted: bool = False, reason: str = "worker shutting down") -> None:
        """Shutdown: gives unfinished runs back to the queue. Runs ``still_going`` (see
        :meth:`still_going`) keep their resource lock until they end. ``unstarted`` runs
        (prefetched), and any run with no task (it never started: a prefetched run a late
        renewal's give-back found), get their attempt back however often their job was released
        before, and are not counted among its releases."""
        await self._put_back(runs, still_going=still_going, unstarted=unstarted,
                             reason=reason, event="released", dead_error=(
                                 "released at shutdown with no attempt left (is the grace "
                                 "period shorter than the job?)"))

    async def hand_back(self, runs: Sequence[Run]) -> None:
        """Gives prefetched runs the work outgrew back to the head of the queue, unstarted,
        their attempt refunded (see :func:`antre.prefetch.jobs_to_hand_back`)."""
        await self._put_back(runs, still_going=(), unstarted=True, reason=HAND_BACK_REASON,
                             event="handed_back", dead_error=(
                                 "handed back after its lease expired, with no attempt left"))

    async def _put_back(self, runs: Sequence[Run], *, still_going: Collection[Run],
                        unstarted: bool, reason: str, event: ReleaseEvent,
                        dead_error: str) -> None:
        outcomes: list[ReleaseOutcome] = []
        deadline = time.monotonic() + RELEASE_BUDGET_S  # for every call of the release together
        for chunk in scripts.chunked(runs):
            try:
                chunk_outcomes = await self.outages.settle(release_op(
                    self.queue, [run.lease for run in chunk], worker_id=self.worker_id,
                    reason=reason, event=event,
                    keep_locks={run.claimed.id for run in still_going},
                    unstarted={run.claimed.id for run in chunk
                               if unstarted or run.task is None}),
                    budget_s=max(deadline - time.monotonic(), 0.1))
                outcomes += chunk_outcomes
            except (RedisUnavailable, LeaseLost):
                outcomes += [None] * len(chunk)
        for run, outcome in zip(runs, outcomes, strict=True):
            self.held.forget(run)
            # Whatever the answer: a release given up on (Redis away) may have run with its
            # reply lost and kept the lock, and a stop waits for every handler still going.
            # Tracking a lock that was not kept is harmless (see fail).
            if run in still_going:
                self._keep_lock_while_going(run)
            if outcome == "dead":  # the release spent the job's last attempt
                self.outcomes.record(run, "dead", level=logging.WARNING, error=dead_error)
            else:
                self.outcomes.record(run, outcome or "lease_lost")

    async def give_back(self, jobs: Sequence[ClaimedJob], *, reason: str) -> None:
        """A claim whose leases cannot be trusted (its reply came back too late, Redis having
        stalled while it ran, or too few replicas confirmed it): the jobs are released
        unstarted rather than run on a lease that may be gone. What cannot be released
        expires and is requeued by the reaper. Counted ``released``, not ``handed_back``: a
        sign of trouble or of a stop, never routine (see the module's docstring)."""
        log.warning("claimed jobs given back unstarted", extra={
            "worker_id": self.worker_id, "jobs": len(jobs), "reason": reason})
        for chunk in scripts.chunked(jobs):
            with contextlib.suppress(Exception):
                await scripts.run_async(self.redis, release_op(
                    self.queue, [(job.id, job.lease) for job in chunk], worker_id=self.worker_id,
                    reason=reason, unstarted={job.id for job in chunk}))

    def still_going(self, runs: Sequence[Run]) -> set[Run]:
        """The runs whose handler may still be going: a thread that cannot be stopped, or a
        handler going on the loop after its cancellation. A release keeps their resource lock."""
        return {run for run in runs if self.threads.running(run) or self._on_the_loop(run)}

    def _on_the_loop(self, run: Run) -> bool:
        """Whether ``run``'s handler is still going on the event loop, not in a thread (one
        that catches ``CancelledError`` and carries on, or a coroutine a returned thread
        handed over)."""
        return (run.task is not None and not run.task.done()
                and not self.threads.running(run))

    def _keep_lock_while_going(self, run: Run) -> None:
        """Holds the resource lock a release kept while the run goes on (the heartbeat extends
        it: :meth:`kept_locks`) and frees it once the run has ended: a thread when it returns, a
        handler on the loop when its task ends (at once if it has). Freed before, or left to
        expire, the resource's next job could start beside it."""
        if self._on_the_loop(run):
            assert run.task is not None
            self._going_on_loop.add(run)
            run.task.add_done_callback(lambda _: self._ended_on_loop(run))
        else:
            self.threads.keep_lock(run)

    def _ended_on_loop(self, run: Run) -> None:
        self._going_on_loop.discard(run)
        self.unlock_soon(run)

    def kept_locks(self) -> list[KeptLock]:
        """The locks the heartbeat keeps extending: those of runs settled while their handler
        goes on, in a thread or on the loop."""
        return self.threads.kept_locks() + [
            lock for run in self._going_on_loop if (lock := run.kept_lock) is not None]

    async def handlers_ended(self) -> None:
        """At a stop, once every run is settled: cancels once more, then waits for, the
        handlers still going on the loop after their release, while the heartbeat goes on
        extending their locks. ``antre worker``'s event loop (asyncio.run) would do the same,
        but with the heartbeat stopped: their locks would expire one lease later and the
        resource's next job start beside them."""
        if self._going_on_loop:
            log.warning("async handlers go on after their cancellation; the worker waits for "
                        "them to end (their resource locks kept meanwhile)", extra={
                            "worker_id": self.worker_id,
                            "job_ids": [run.claimed.id for run in self._going_on_loop]})
        for run in self._going_on_loop:
            if run.task is not None:
                run.task.cancel()
        while self._going_on_loop:
            await asyncio.wait({run.task for run in self._going_on_loop if run.task is not None})

    def unlock_soon(self, run: Run) -> None:
        """A thread that kept its run's resource lock returned: free the lock. Not freed (Redis
        away), it expires one lease after the heartbeat last extended it."""
        if run.claimed.resource_key is None:
            return
        task = asyncio.ensure_future(self.outages.settle(
            unlock_op(self.queue, run.lease, resource_key=run.claimed.resource_key), budget_s=5.0))
        self._unlocks.add(task)
        task.add_done_callback(self._unlocks.discard)
        task.add_done_callback(lambda done: done.cancelled() or done.exception())

    async def finish(self) -> None:
        """Waits (briefly) for the unlocks under way."""
        if self._unlocks:
            await asyncio.wait(self._unlocks, timeout=5.0)
