"""huey: ``huey_consumer`` with its defaults (one worker thread)."""

from __future__ import annotations

from collections.abc import Callable

from huey import RedisHuey

from bench.adapters import _base, _record

huey = RedisHuey("bench", url=_base.redis_url())


@huey.task()
def noop() -> None:
    _record.done()


@huey.task()
def warm() -> None:
    _record.warm_sync()


@huey.task()
def slow(token: str) -> None:
    _record.slow_sync(token)


@huey.task()
def latency(sent_at: str) -> None:
    _record.started(sent_at)


@huey.task()
def io_def() -> None:
    _record.io_sync()


_TASKS = {"noop": noop, "warm": warm, "slow": slow, "latency": latency, "io_def": io_def}


class HueyAdapter:
    name = "huey"
    ready_keys = ("huey.redis.bench",)
    has_bulk = False
    fork_per_job = False
    processes_note = "N x `huey_consumer` (1 worker thread each)"
    io_styles = ("def",)

    def enqueue(self, kind: str, n: int, *, bulk: bool, token: str = "") -> float:
        task = _TASKS[kind]
        args = (token,) if token else ()
        return _base.timed_loop(n, lambda: task(*args))

    def sender(self, kind: str) -> Callable[[str], object]:
        return _TASKS[kind]

    def worker_commands(self, processes: int) -> list[list[str]]:
        return [[_base.script("huey_consumer"), f"{__name__}.huey"]] * processes

    def io_worker(self, style: str, concurrency: int) -> list[str]:
        return [*self.worker_commands(1)[0], "-k", "thread", "-w", str(concurrency)]


ADAPTER = HueyAdapter()
