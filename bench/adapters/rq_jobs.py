"""rq: ``rq worker`` (the default Worker forks a work horse per job)."""

from __future__ import annotations

from redis import Redis
from rq import Queue

from bench.adapters import _base, _record


def noop() -> None:
    _record.done()


def warm() -> None:
    _record.warm_sync()


def slow(token: str) -> None:
    _record.slow_sync(token)


_FUNCTIONS = {"noop": noop, "warm": warm, "slow": slow}


class RqAdapter:
    name = "rq"
    ready_keys = ("rq:queue:default",)
    has_bulk = True  # Queue.enqueue_many, one pipeline per call
    fork_per_job = True
    processes_note = "N x `rq worker` (fork per job)"
    max_drain_jobs = 1_000

    def enqueue(self, kind: str, n: int, *, bulk: bool, token: str = "") -> float:
        connection = Redis.from_url(_base.redis_url())
        queue = Queue("default", connection=connection)
        fn = _FUNCTIONS[kind]
        args = (token,) if token else ()
        try:
            if bulk:
                def many() -> None:
                    for start in range(0, n, 1000):
                        queue.enqueue_many([Queue.prepare_data(fn, args)
                                            for _ in range(min(1000, n - start))])
                return _base.timed_loop(1, many)
            return _base.timed_loop(n, lambda: queue.enqueue(fn, *args))
        finally:
            connection.close()

    def worker_commands(self, processes: int) -> list[list[str]]:
        return [[_base.script("rq"), "worker", "--url", _base.redis_url(), "default"]] * processes


ADAPTER = RqAdapter()
