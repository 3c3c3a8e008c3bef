"""Giving back the leases a late renewal kept: its reply came back after the run's local
deadline (a stalled reply, a GC pause, a CPU-starved pod), so the worker had abandoned the run
while Redis extended its lease by a whole lease. Left alone, the job would sit in
``processing``, run by nobody, until that lease expired (a visibility timeout), its resource
locked all along; given back, it goes to the head of the queue at once.

The release is the one of a run interrupted at a stop (:meth:`antre.settling.Settler.release`):
the attempt is refunded for the first releases of a job (always for a prefetched run that
never started, which is not counted among them), and the outcome logged and counted is
``released`` (or ``dead``, a release that spent the job's last attempt), the run's only one.
The resource lock stays held while the run may still be going: a handler thread cannot be
stopped, and keeps its lock until it returns, as after a stop. A handler still ending on the
loop (cancelled at the deadline, not ended yet) is given a moment; one that outlives it keeps
its job and lock leased until the lease expires, as before, since the lock of a released job
can be kept only for a thread.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Final

from antre.handler_threads import HandlerThreads
from antre.outcomes import Outcomes
from antre.runs import Run
from antre.settling import RELEASE_BUDGET_S, Settler

log = logging.getLogger("antre.worker")

#: The job history's reason for the release; short, as every history entry is kept in the
#: job's record.
REASON: Final = "renewal came late; run abandoned"
#: How long a handler cancelled at its deadline may still take to end, once its lease turns out
#: to be held, before its lease is left to expire instead.
ENDING_WAIT_S: Final = 1.0


@dataclass(slots=True)
class GiveBack:
    """How the runs whose lease a late renewal kept are given back."""

    #: Handler threads still running: released, their resource lock kept until they return.
    locked: list[Run] = field(default_factory=list)
    #: Runs whose handler has ended (or never started): released, their lock freed.
    stopped: list[Run] = field(default_factory=list)
    #: Runs whose handler may still be going on the loop: not released while it does.
    ending: list[Run] = field(default_factory=list)


def sort_out(runs: Sequence[Run], *, thread_running: Callable[[Run], bool]) -> GiveBack:
    """Sorts ``runs`` by what their handler may still be doing. A run whose handler thread
    returned while its task has not ended is still ending: what the thread returned may be a
    coroutine the task runs on the loop."""
    plan = GiveBack()
    for run in runs:
        if thread_running(run):
            plan.locked.append(run)
        elif run.task is not None and not run.task.done():
            plan.ending.append(run)
        else:
            plan.stopped.append(run)
    return plan


class LateRenewals:
    def __init__(self, settler: Settler, threads: HandlerThreads, outcomes: Outcomes, *,
                 worker_id: str) -> None:
        self.settler = settler
        self.threads = threads
        self.outcomes = outcomes
        self.worker_id = worker_id
        self._under_way: set[asyncio.Future[Any]] = set()

    def give_back_soon(self, runs: Sequence[Run], held_until: float) -> None:
        """Gives ``runs`` back, beside the heartbeat (whose next beat must not wait for it).
        ``held_until`` (monotonic): until when the renewal's lease can be trusted."""
        log.warning("a lease renewal came back after its run's deadline; the job is given back",
                    extra={"worker_id": self.worker_id, "jobs": len(runs),
                           "job_ids": [run.claimed.id for run in runs]})
        task = asyncio.ensure_future(self._give_back(list(runs), held_until))
        self._under_way.add(task)
        task.add_done_callback(self._under_way.discard)
        task.add_done_callback(lambda done: done.cancelled() or done.exception())

    async def _give_back(self, runs: list[Run], held_until: float) -> None:
        plan = sort_out(runs, thread_running=self.threads.running)
        wait_s = min(ENDING_WAIT_S, held_until - time.monotonic())
        if plan.ending and wait_s > 0:
            await asyncio.wait({run.task for run in plan.ending if run.task is not None},
                               timeout=wait_s)
        ended = [run for run in plan.ending if run.task is None or run.task.done()]
        for run in plan.ending:
            if run not in ended:
                self.outcomes.record(run, "lease_lost", error=(
                    "lease not renewed before its deadline; its handler did not end when "
                    "cancelled, so its lease is left to expire"))
        # A thread that returned since it was sorted finds its lock freed at once (keep_lock).
        released = [*plan.locked, *plan.stopped, *ended]
        if released:
            await self.settler.release(released, still_going=plan.locked, reason=REASON)

    async def finish(self) -> None:
        """Waits (briefly) for the give-backs under way."""
        if self._under_way:
            await asyncio.wait(self._under_way, timeout=ENDING_WAIT_S + RELEASE_BUDGET_S)
