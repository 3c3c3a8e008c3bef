"""antre: async no-op handlers, ``antre worker`` with its defaults (concurrency 16)."""

from __future__ import annotations

import os
import sys
import time

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


class AntreAdapter:
    name = "antre"
    ready_keys = (antre.QueueSettings(name=QUEUE).keys.ready,)
    has_bulk = True
    fork_per_job = False
    processes_note = "N x `antre worker` (concurrency 16, asyncio)"

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

    def worker_commands(self, processes: int) -> list[list[str]]:
        command = [sys.executable, "-m", "antre", "worker", "--handlers", __name__, "--queue", QUEUE,
                   "--redis-url", self.url]
        return [command] * processes


ADAPTER = AntreAdapter()
