"""antre: async no-op handlers, ``antre worker`` with its defaults (concurrency 16)."""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Callable

import antre

from bench.adapters import _base, _record

QUEUE = "bench"


@antre.handler("noop")
async def noop(job: antre.Job) -> None:
    _record.done()


@antre.handler("warm")
async def warm(job: antre.Job) -> None:
    await _record.warm_async()


@antre.handler("slow")
async def slow(job: antre.Job) -> None:
    await _record.slow_async(job.payload)


@antre.handler("latency")
async def latency(job: antre.Job) -> None:
    _record.started(job.payload)


@antre.handler("latency_def")
def latency_def(job: antre.Job) -> None:
    _record.started(job.payload)


@antre.handler("io_def")
def io_def(job: antre.Job) -> None:
    _record.io_sync()


@antre.handler("io_async")
async def io_async(job: antre.Job) -> None:
    await _record.io_async()


class AntreAdapter:
    name = "antre"
    ready_keys = (antre.QueueSettings(name=QUEUE).keys.ready,)
    has_bulk = True
    fork_per_job = False
    processes_note = "N x `antre worker` (concurrency 16, asyncio)"
    io_styles = ("def", "async")

    def __init__(self) -> None:
        self.url = os.environ["BENCH_REDIS_URL"]

    def enqueue(self, kind: str, n: int, *, bulk: bool, token: str = "") -> float:
        # ANTRE_* variables apply as they do to the workers (bench/durable.py sets
        # ANTRE_DURABLE_REPLICAS); unset, these are the defaults.
        queue = antre.Queue.from_url(self.url, settings=antre.QueueSettings.from_env(name=QUEUE))
        payload = token or None
        try:
            start = time.perf_counter()
            if bulk:
                queue.enqueue_many([(kind, payload)] * n)
            else:
                for _ in range(n):
                    queue.enqueue(kind, payload)
            return time.perf_counter() - start
        finally:
            queue.close()

    def enqueue_concurrently(self, kind: str, n: int, *, concurrency: int) -> float:
        async def go() -> float:
            queue = antre.AsyncQueue.from_url(
                self.url, settings=antre.QueueSettings.from_env(name=QUEUE))
            try:
                return await _base.timed_gather(n, concurrency, lambda: queue.enqueue(kind))
            finally:
                await queue.close()
        return _base.run(go())

    def sender(self, kind: str) -> Callable[[str], object]:
        queue = antre.Queue.from_url(self.url, settings=antre.QueueSettings.from_env(name=QUEUE))
        return lambda token: queue.enqueue(kind, token)

    def worker_commands(self, processes: int) -> list[list[str]]:
        command = [sys.executable, "-m", "antre", "worker", "--handlers", __name__, "--queue", QUEUE,
                   "--redis-url", self.url]
        return [command] * processes

    def io_worker(self, style: str, concurrency: int) -> list[str]:
        return [*self.worker_commands(1)[0], "--concurrency", str(concurrency)]


ADAPTER = AntreAdapter()
