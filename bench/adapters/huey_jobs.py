"""huey: ``huey_consumer`` with its defaults (one worker thread)."""

from __future__ import annotations

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


_TASKS = {"noop": noop, "warm": warm, "slow": slow}


class HueyAdapter:
    name = "huey"
    ready_keys = ("huey.redis.bench",)
    has_bulk = False
    fork_per_job = False
    processes_note = "N x `huey_consumer` (1 worker thread each)"

    def enqueue(self, kind: str, n: int, *, bulk: bool, token: str = "") -> float:
        task = _TASKS[kind]
        args = (token,) if token else ()
        return _base.timed_loop(n, lambda: task(*args))

    def worker_commands(self, processes: int) -> list[list[str]]:
        return [[_base.script("huey_consumer"), f"{__name__}.huey"]] * processes


ADAPTER = HueyAdapter()
