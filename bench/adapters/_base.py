"""Helpers shared by the peer adapters."""

from __future__ import annotations

import asyncio
import os
import shutil
import sys
import time
from collections.abc import Awaitable, Callable
from pathlib import Path


def redis_url() -> str:
    """The URL of the redis-server the benchmark started (never a default port)."""
    return os.environ["BENCH_REDIS_URL"]


def script(name: str) -> str:
    """A console script installed beside this interpreter (else on PATH)."""
    sibling = Path(sys.executable).with_name(name)
    if sibling.exists():
        return str(sibling)
    found = shutil.which(name)
    if found is None:
        raise RuntimeError(f"{name}: console script not found; pip install -e '.[bench]'")
    return found


def timed_loop(n: int, call: Callable[[], object]) -> float:
    start = time.perf_counter()
    for _ in range(n):
        call()
    return time.perf_counter() - start


async def timed_loop_async(n: int, call: Callable[[], Awaitable[object]]) -> float:
    start = time.perf_counter()
    for _ in range(n):
        await call()
    return time.perf_counter() - start


async def timed_gather(n: int, concurrency: int, call: Callable[[], Awaitable[object]]) -> float:
    """Seconds to make ``n`` calls, ``concurrency`` at a time with asyncio.gather (the way an
    async web service enqueues from many requests at once)."""
    start = time.perf_counter()
    for done in range(0, n, concurrency):
        await asyncio.gather(*(call() for _ in range(min(concurrency, n - done))))
    return time.perf_counter() - start


def run(coro: Awaitable[float]) -> float:
    return asyncio.run(coro)  # type: ignore[arg-type]
