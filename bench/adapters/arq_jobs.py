"""arq: ``arq WorkerSettings`` with arq's defaults (max_jobs 10, poll_delay 0.5 s)."""

from __future__ import annotations

import sys
from typing import Any

from arq import create_pool
from arq.connections import RedisSettings

from bench.adapters import _base, _record


async def noop(ctx: dict[str, Any]) -> None:
    _record.done()


async def warm(ctx: dict[str, Any]) -> None:
    await _record.warm_async()


async def slow(ctx: dict[str, Any], token: str) -> None:
    await _record.slow_async(token)


class WorkerSettings:
    functions = [noop, warm, slow]
    redis_settings = RedisSettings.from_dsn(_base.redis_url())


class ArqAdapter:
    name = "arq"
    ready_keys = ("arq:queue",)
    has_bulk = False
    fork_per_job = False
    processes_note = "N x `arq WorkerSettings` (max_jobs 10, polls every 0.5 s)"
    max_drain_jobs = 3_000

    def enqueue(self, kind: str, n: int, *, bulk: bool, token: str = "") -> float:
        async def go() -> float:
            pool = await create_pool(WorkerSettings.redis_settings)
            args = (token,) if token else ()
            try:
                return await _base.timed_loop_async(n, lambda: pool.enqueue_job(kind, *args))
            finally:
                await pool.aclose()
        return _base.run(go())

    def enqueue_concurrently(self, kind: str, n: int, *, concurrency: int) -> float:
        async def go() -> float:
            pool = await create_pool(WorkerSettings.redis_settings)
            try:
                return await _base.timed_gather(n, concurrency, lambda: pool.enqueue_job(kind))
            finally:
                await pool.aclose()
        return _base.run(go())

    def worker_commands(self, processes: int) -> list[list[str]]:
        return [[sys.executable, "-m", "arq", f"{__name__}.WorkerSettings"]] * processes


ADAPTER = ArqAdapter()
