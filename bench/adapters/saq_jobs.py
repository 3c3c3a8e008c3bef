"""saq: ``saq settings`` with saq's defaults (concurrency 10)."""

from __future__ import annotations

import sys
from typing import Any

from saq import Queue

from bench.adapters import _base, _record


async def noop(ctx: dict[str, Any]) -> None:
    _record.done()


async def warm(ctx: dict[str, Any]) -> None:
    await _record.warm_async()


async def slow(ctx: dict[str, Any], *, token: str) -> None:
    await _record.slow_async(token)


settings = {"queue": Queue.from_url(_base.redis_url()), "functions": [noop, warm, slow]}


class SaqAdapter:
    name = "saq"
    ready_keys = ("saq:default:queued",)
    has_bulk = False
    fork_per_job = False
    processes_note = "N x `saq settings` (concurrency 10)"

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

    def worker_commands(self, processes: int) -> list[list[str]]:
        return [[sys.executable, "-m", "saq", f"{__name__}.settings"]] * processes


ADAPTER = SaqAdapter()
