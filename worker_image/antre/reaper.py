"""The reaper: requeues expired leases, promotes due retries and delayed jobs.

Workers run a pass every few seconds in-process, one process per queue at a time (a short pass
lock in Redis), so recovery never waits for the CronJob; ``antre reaper --once`` runs the same
pass from the CronJob as a backstop when no worker is up (for example scaled to zero).
"""

from __future__ import annotations

import asyncio
import logging
import random
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from antre.protocol import scripts
from antre.protocol.reap import ReapResult, reap_op
from antre.settings import QueueSettings

if TYPE_CHECKING:  # only a worker serving metrics imports prometheus_client
    from antre.metrics import WorkerMetrics

log = logging.getLogger("antre.reaper")



@dataclass(slots=True)
class ReapTotals:
    passes: int = 0
    requeued: int = 0
    dead: int = 0
    promoted: int = 0
    workers_dropped: int = 0

    def add(self, result: ReapResult) -> None:
        self.passes += 1
        self.requeued += result.requeued
        self.dead += result.dead
        self.promoted += result.promoted
        self.workers_dropped += result.workers_dropped


def run_once(redis: Any, queue: QueueSettings, *, limit: int | None = None,
             max_calls: int = 1000) -> ReapTotals:
    """A full pass from a sync client: repeats while a batch limit is hit (bounded). Jobs per
    call of each kind: ``limit``, by default MAX_JOBS_PER_CALL; a bigger backlog is worked off in
    several calls, so no call holds Redis long."""
    limit = limit or scripts.MAX_JOBS_PER_CALL
    totals = ReapTotals()
    for _ in range(max_calls):
        result = scripts.run(redis, reap_op(queue, limit=limit, pass_lock_ms=0, holder="cronjob"))
        totals.add(result)
        if not result.more:
            break
    return totals


class Reaper:
    """The in-process reaper loop of a worker."""

    def __init__(self, redis: Any, queue: QueueSettings, *, interval_s: float, holder: str,
                 metrics: WorkerMetrics | None = None) -> None:
        self.redis = redis
        self.queue = queue
        self.interval_s = interval_s
        self.holder = holder
        self.metrics = metrics

    async def step(self) -> ReapTotals:
        totals = ReapTotals()
        # The pass lock outlives the pass a little, so N workers make ~1 pass per interval.
        pass_lock_ms = max(int(self.interval_s * 900), 50)
        while True:
            result = await scripts.run_async(self.redis, reap_op(
                self.queue, limit=scripts.MAX_JOBS_PER_CALL, pass_lock_ms=pass_lock_ms,
                holder=self.holder))
            if not result.ran:
                break
            totals.add(result)
            if not result.more:
                break
            pass_lock_ms = 0  # we hold the pass already
        if totals.requeued or totals.dead or totals.promoted:
            log.info("reaper pass", extra={"queue": self.queue.name, "requeued": totals.requeued,
                                           "dead": totals.dead, "promoted": totals.promoted})
        if self.metrics is not None:
            if totals.requeued or totals.dead:
                self.metrics.reaper_requeued.labels(self.queue.name).inc(totals.requeued + totals.dead)
            if totals.promoted:
                self.metrics.reaper_promoted.labels(self.queue.name).inc(totals.promoted)
        return totals

    async def run(self) -> None:
        while True:
            try:
                await self.step()
            except Exception as exc:  # outage, or Redis refusing for a while: keep going
                log.warning("reaper pass failed; retrying", extra={"error": str(exc)})
            # Jitter keeps many workers from arriving at the pass lock together.
            await asyncio.sleep(self.interval_s * random.uniform(0.8, 1.2))
