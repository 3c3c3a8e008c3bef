"""taskiq with taskiq-redis: ``taskiq worker --workers N`` on a ListQueueBroker (BRPOP)."""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Callable

from taskiq.kicker import AsyncKicker
from taskiq_redis import ListQueueBroker

from bench.adapters import _base, _record

broker = ListQueueBroker(_base.redis_url())


@broker.task(task_name="noop")
async def noop() -> None:
    _record.done()


@broker.task(task_name="warm")
async def warm() -> None:
    await _record.warm_async()


@broker.task(task_name="slow")
async def slow(token: str) -> None:
    await _record.slow_async(token)


@broker.task(task_name="latency")
async def latency(sent_at: str) -> None:
    _record.started(sent_at)


@broker.task(task_name="io_async")
async def io_async() -> None:
    await _record.io_async()


class TaskiqAdapter:
    name = "taskiq"
    ready_keys = ("taskiq",)
    has_bulk = False
    fork_per_job = False
    processes_note = "one `taskiq worker --workers N`"
    io_styles = ("async",)

    def enqueue(self, kind: str, n: int, *, bulk: bool, token: str = "") -> float:
        async def go() -> float:
            client = ListQueueBroker(_base.redis_url())
            await client.startup()
            kicker: AsyncKicker[..., None] = AsyncKicker(task_name=kind, broker=client, labels={})
            args = (token,) if token else ()
            try:
                return await _base.timed_loop_async(n, lambda: kicker.kiq(*args))
            finally:
                await client.shutdown()
        return _base.run(go())

    def enqueue_concurrently(self, kind: str, n: int, *, concurrency: int) -> float:
        async def go() -> float:
            client = ListQueueBroker(_base.redis_url())
            await client.startup()
            kicker: AsyncKicker[..., None] = AsyncKicker(task_name=kind, broker=client, labels={})
            try:
                return await _base.timed_gather(n, concurrency, kicker.kiq)
            finally:
                await client.shutdown()
        return _base.run(go())

    def sender(self, kind: str) -> Callable[[str], object]:
        loop = asyncio.new_event_loop()
        client = ListQueueBroker(_base.redis_url())
        loop.run_until_complete(client.startup())
        kicker: AsyncKicker[..., None] = AsyncKicker(task_name=kind, broker=client, labels={})
        return lambda token: loop.run_until_complete(kicker.kiq(token))

    def worker_commands(self, processes: int) -> list[list[str]]:
        return [[sys.executable, "-m", "taskiq", "worker", f"{__name__}:broker",
                 "--workers", str(processes)]]

    def io_worker(self, style: str, concurrency: int) -> list[str]:
        return [*self.worker_commands(1)[0], "--max-async-tasks", str(concurrency)]


ADAPTER = TaskiqAdapter()
