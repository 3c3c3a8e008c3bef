"""saq: ``saq settings`` with saq's defaults (concurrency 10)."""

from __future__ import annotations

import asyncio
import os
import sys
from collections.abc import Callable
from typing import Any

from saq import Queue

from bench.adapters import _base, _record


async def noop(ctx: dict[str, Any]) -> None:
    _record.done()


async def warm(ctx: dict[str, Any]) -> None:
    await _record.warm_async()


async def slow(ctx: dict[str, Any], *, token: str) -> None:
    await _record.slow_async(token)


async def latency(ctx: dict[str, Any], *, token: str) -> None:
    _record.started(token)


async def io_async(ctx: dict[str, Any]) -> None:
    await _record.io_async()


settings = {"queue": Queue.from_url(_base.redis_url()),
            "functions": [noop, warm, slow, latency, io_async],
            # saq's CLI takes no concurrency flag: bench/real_work.py sets it here.
            "concurrency": int(os.environ.get("BENCH_SAQ_CONCURRENCY", "10"))}


class SaqAdapter:
    name = "saq"
    ready_keys = ("saq:default:queued",)
    has_bulk = False
    fork_per_job = False
    processes_note = "N x `saq settings` (concurrency 10)"
    io_styles = ("async",)

    def enqueue(self, kind: str, n: int, *, bulk: bool, token: str = "") -> float:
        async def go() -> float:
            queue = Queue.from_url(_base.redis_url())
            await queue.connect()
            kwargs = {"token": token} if token else {}
            try:
                return await _base.timed_loop_async(n, lambda: queue.enqueue(kind, **kwargs))
            finally:
                await queue.disconnect()
        return _base.run(go())

    def enqueue_concurrently(self, kind: str, n: int, *, concurrency: int) -> float:
        async def go() -> float:
            queue = Queue.from_url(_base.redis_url())
            await queue.connect()
            try:
                return await _base.timed_gather(n, concurrency, lambda: queue.enqueue(kind))
            finally:
                await queue.disconnect()
        return _base.run(go())

    def sender(self, kind: str) -> Callable[[str], object]:
        loop = asyncio.new_event_loop()
        queue = Queue.from_url(_base.redis_url())
        loop.run_until_complete(queue.connect())
        return lambda token: loop.run_until_complete(queue.enqueue(kind, token=token))

    def worker_commands(self, processes: int) -> list[list[str]]:
        return [[sys.executable, "-m", "saq", f"{__name__}.settings"]] * processes

    def io_worker(self, style: str, concurrency: int) -> list[str]:
        return ["env", f"BENCH_SAQ_CONCURRENCY={concurrency}", *self.worker_commands(1)[0]]


ADAPTER = SaqAdapter()
