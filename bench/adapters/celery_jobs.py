"""celery: ``celery worker`` with its defaults (prefork pool, prefetch 4, ack before run)."""

from __future__ import annotations

import sys
from collections.abc import Callable

from celery import Celery

from bench.adapters import _base, _record

app = Celery("bench", broker=_base.redis_url())
app.conf.broker_connection_retry_on_startup = True


@app.task(name="noop")
def noop() -> None:
    _record.done()


@app.task(name="warm")
def warm() -> None:
    _record.warm_sync()


@app.task(name="slow")
def slow(token: str) -> None:
    _record.slow_sync(token)


@app.task(name="latency")
def latency(sent_at: str) -> None:
    _record.started(sent_at)


@app.task(name="io_def")
def io_def() -> None:
    _record.io_sync()


_TASKS = {"noop": noop, "warm": warm, "slow": slow, "latency": latency, "io_def": io_def}


class CeleryAdapter:
    name = "celery"
    ready_keys = ("celery",)
    has_bulk = False
    fork_per_job = False
    processes_note = "one `celery worker -c N` (prefork: N child processes)"
    io_styles = ("def",)

    def enqueue(self, kind: str, n: int, *, bulk: bool, token: str = "") -> float:
        task = _TASKS[kind]
        args = (token,) if token else ()
        return _base.timed_loop(n, lambda: task.delay(*args))

    def sender(self, kind: str) -> Callable[[str], object]:
        return _TASKS[kind].delay

    def worker_commands(self, processes: int) -> list[list[str]]:
        return [[sys.executable, "-m", "celery", "-A", __name__, "worker", "-c", str(processes),
                 "--loglevel", "WARNING"]]

    def io_worker(self, style: str, concurrency: int) -> list[str]:
        # Threads: plain def handlers waiting on I/O, as antre's and dramatiq's run.
        return [*self.worker_commands(1)[0][:-4], "-P", "threads", "-c", str(concurrency),
                "--loglevel", "WARNING"]


ADAPTER = CeleryAdapter()
