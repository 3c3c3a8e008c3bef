"""Giving back the leases a late renewal kept: its reply came back after the run's local
deadline (a stalled reply, a GC pause, a CPU-starved pod), so the worker had abandoned the run
while Redis extended its lease by a whole lease. Left alone, the job would sit in
``processing``, run by nobody, until that lease expired (a visibility timeout), its resource
locked all along; given back, it goes to the head of the queue at once.

The release is the one of a run interrupted at a stop (:meth:`antre.settling.Settler.release`):
the attempt is refunded for the first releases of a job (always for a prefetched run that
never started, which is not counted among them), and the outcome logged and counted is
``released`` (or ``dead``, a release that spent the job's last attempt), the run's only one.
As at a stop, a run whose handler may still be going (a thread that cannot be stopped, or an
async handler not ended after its cancellation) keeps its resource lock until it ends, so the
resource's next job waits for it; a job without a resource may start elsewhere meanwhile.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence
from typing import Any, Final

from antre.runs import Run
from antre.settling import RELEASE_BUDGET_S, Settler

log = logging.getLogger("antre.worker")

#: The job history's reason for the release; short, as every history entry is kept in the
#: job's record.
REASON: Final = "renewal came late; run abandoned"


class LateRenewals:
    def __init__(self, settler: Settler, *, worker_id: str) -> None:
        self.settler = settler
        self.worker_id = worker_id
        self._under_way: set[asyncio.Future[Any]] = set()

    def give_back_soon(self, runs: Sequence[Run]) -> None:
        """Gives ``runs`` back, beside the heartbeat (whose next beat must not wait for it)."""
        log.warning("a lease renewal came back after its run's deadline; the job is given back",
                    extra={"worker_id": self.worker_id, "jobs": len(runs),
                           "job_ids": [run.claimed.id for run in runs]})
        task = asyncio.ensure_future(self.settler.release(
            list(runs), still_going=self.settler.still_going(runs), reason=REASON))
        self._under_way.add(task)
        task.add_done_callback(self._under_way.discard)
        task.add_done_callback(self._report_failure)

    def _report_failure(self, task: asyncio.Future[Any]) -> None:
        # The release settles every outcome it can; anything else would leave the jobs leased
        # to nobody until their lease expires, so it is said once, not dropped.
        if not task.cancelled() and task.exception() is not None:
            log.error("giving back the leases of a late renewal failed; they expire instead",
                      extra={"worker_id": self.worker_id, "error": repr(task.exception())})

    async def finish(self) -> None:
        """Waits (briefly) for the give-backs under way."""
        if self._under_way:
            await asyncio.wait(self._under_way, timeout=RELEASE_BUDGET_S)
