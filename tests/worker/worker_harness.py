"""Running a Worker in-process for the tests (and ``eventually``, to wait on conditions with
deadlines, re-exported for the worker tests)."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from typing import Any

from antre.handlers import HandlerRegistry
from antre.metrics import WorkerMetrics
from antre.settings import QueueSettings, WorkerSettings
from antre.worker import Worker
from invariants import read_record
from redis_servers import eventually

__all__ = ["FAST", "eventually", "running_worker", "status_of"]

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


def status_of(redis_client: Any, qs: QueueSettings, job_id: str) -> str | None:
    return read_record(redis_client, qs, job_id).get("status")
