"""Running a Worker in-process for the tests, and waiting on conditions with deadlines."""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import time
from collections.abc import AsyncIterator, Callable
from typing import Any

from antre.handlers import HandlerRegistry
from antre.metrics import WorkerMetrics
from antre.settings import QueueSettings, WorkerSettings
from antre.worker import Worker

#: Short timings so the tests run fast; each test overrides what it is about.
FAST = {"visibility_timeout_s": 5.0, "reaper_interval_s": 0.2, "grace_period_s": 5.0,
        "lock_defer_s": 0.05, "concurrency": 4}


@contextlib.asynccontextmanager
async def running_worker(redis: Any, qs: QueueSettings, registry: HandlerRegistry, *,
                         worker_id: str = "w1", metrics: WorkerMetrics | None = None,
                         **settings: Any) -> AsyncIterator[Worker]:
    worker = Worker(redis, qs, WorkerSettings(**{**FAST, **settings}), registry, worker_id=worker_id,
                    metrics=metrics)
    task = asyncio.create_task(worker.run(), name=f"worker-{worker_id}")
    try:
        yield worker
    finally:
        worker.stop()
        await asyncio.wait_for(task, 15)


async def eventually(predicate: Callable[[], Any], timeout_s: float = 10.0,
                     message: str = "condition") -> Any:
    """Polls a sync or async predicate on the loop until it is truthy, or fails at the deadline."""
    deadline = time.monotonic() + timeout_s
    while True:
        value = predicate()
        if inspect.isawaitable(value):
            value = await value
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout_s}s waiting for {message}")
        await asyncio.sleep(0.01)


def status_of(redis_client: Any, qs: QueueSettings, job_id: str) -> str | None:
    return redis_client.hget(qs.keys.job(job_id), "status")
