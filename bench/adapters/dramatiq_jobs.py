"""dramatiq: ``dramatiq module --processes N`` (8 threads per process, the default)."""

from __future__ import annotations

import sys
from collections.abc import Callable

import dramatiq
from dramatiq.brokers.redis import RedisBroker

from bench.adapters import _base, _record

broker = RedisBroker(url=_base.redis_url())
dramatiq.set_broker(broker)


@dramatiq.actor(queue_name="default")
def noop() -> None:
    _record.done()


@dramatiq.actor(queue_name="default")
def warm() -> None:
    _record.warm_sync()


@dramatiq.actor(queue_name="default")
def slow(token: str) -> None:
    _record.slow_sync(token)


@dramatiq.actor(queue_name="default")
def latency(sent_at: str) -> None:
    _record.started(sent_at)


@dramatiq.actor(queue_name="default")
def io_def() -> None:
    _record.io_sync()


_ACTORS = {"noop": noop, "warm": warm, "slow": slow, "latency": latency, "io_def": io_def}


class DramatiqAdapter:
    name = "dramatiq"
    ready_keys = ("dramatiq:default",)
    has_bulk = False
    fork_per_job = False
    processes_note = "one `dramatiq --processes N` (8 threads each)"
    io_styles = ("def",)

    def enqueue(self, kind: str, n: int, *, bulk: bool, token: str = "") -> float:
        actor = _ACTORS[kind]
        args = (token,) if token else ()
        return _base.timed_loop(n, lambda: actor.send(*args))

    def sender(self, kind: str) -> Callable[[str], object]:
        return _ACTORS[kind].send

    def worker_commands(self, processes: int) -> list[list[str]]:
        return [[sys.executable, "-m", "dramatiq", __name__, "--processes", str(processes)]]

    def io_worker(self, style: str, concurrency: int) -> list[str]:
        return [*self.worker_commands(1)[0], "--threads", str(concurrency)]


ADAPTER = DramatiqAdapter()
