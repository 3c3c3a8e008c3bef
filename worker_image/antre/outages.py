"""Riding out a Redis outage: backoff between attempts, one warning per outage, a metric per
failed call, and settle calls retried within a budget. Shared by the worker's loops."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any, TypeVar

from antre import errors
from antre.backoff import Backoff
from antre.protocol import scripts

if TYPE_CHECKING:  # only a worker serving metrics imports prometheus_client
    from antre.metrics import WorkerMetrics

log = logging.getLogger("antre.worker")

T = TypeVar("T")

#: Delays between attempts to reach Redis during an outage.
OUTAGE_BACKOFF = Backoff(base_s=0.05, max_s=2.0)


class Outages:
    def __init__(self, redis: Any, *, queue_name: str, worker_id: str,
                 metrics: WorkerMetrics | None) -> None:
        self.redis = redis
        self.queue_name = queue_name
        self.worker_id = worker_id
        self.metrics = metrics

    async def wait(self, operation: str, exc: Exception, count: int) -> None:
        """After the ``count``-th failed call in a row: report it, then back off."""
        if count == 1:
            log.warning("redis call failed; retrying with backoff",
                        extra={"operation": operation, "error": str(exc),
                               "worker_id": self.worker_id})
        if self.metrics is not None:
            self.metrics.redis_errors.labels(self.queue_name, operation).inc()
        await asyncio.sleep(OUTAGE_BACKOFF.delay_ms(count) / 1000 + 0.01)

    async def settle(self, op: scripts.Op[T], *, budget_s: float | None,
                     call: Callable[[scripts.Op[T]], Awaitable[T]] | None = None) -> T:
        """Runs a settle call (through ``call``, else the client), retrying through an outage
        for up to ``budget_s`` (None: until it lands). A refusal of the script itself (lease
        lost, job gone) is raised at once."""
        deadline = time.monotonic() + (float("inf") if budget_s is None else budget_s)
        attempt = 0
        while True:
            try:
                if call is not None:
                    return await call(op)
                return await scripts.run_async(self.redis, op)
            except (errors.LeaseLost, errors.JobNotFound):
                raise
            except Exception as exc:  # outage or a refusing server: retry within the budget
                attempt += 1
                if time.monotonic() >= deadline:
                    raise errors.RedisUnavailable(f"{op.script.name} gave up: {exc}") from exc
                await self.wait(op.script.name, exc, attempt)
