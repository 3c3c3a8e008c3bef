"""What every benchmark job does besides nothing: it appends to a file the harness reads.

An ``O_APPEND`` write is atomic and costs one syscall, works the same from threads, forked
children and separate processes, and issues no Redis command, so every library pays the same
small price and the Redis counters stay the library's own. ``BENCH_RECORD_DIR`` names the
directory; without it the calls do nothing.
"""

from __future__ import annotations

import asyncio
import os
import time

#: How long a warm-up job takes: long enough that a batch spreads over every worker process.
WARM_S = 0.02
#: How long the job that the kill test interrupts runs.
SLOW_S = 8.0
#: The I/O a "real work" job waits on (bench/real_work.py): a sleep, as a call to a service is.
IO_S = 0.01

_fds: dict[tuple[int, str], int] = {}


def _append(name: str, data: bytes) -> None:
    directory = os.environ.get("BENCH_RECORD_DIR")
    if not directory:
        return
    key = (os.getpid(), name)  # a forked child must not share its parent's descriptor table entry
    fd = _fds.get(key)
    if fd is None:
        fd = _fds[key] = os.open(os.path.join(directory, name), os.O_WRONLY | os.O_APPEND | os.O_CREAT)
    os.write(fd, data)


def done() -> None:
    """One no-op job finished: one byte in ``done``."""
    _append("done", b".")


def _warmed() -> None:
    _append("warm", f"{os.getpid()} {os.getppid()}\n".encode())


def warm_sync() -> None:
    time.sleep(WARM_S)
    _warmed()


async def warm_async() -> None:
    await asyncio.sleep(WARM_S)
    _warmed()


def _slow_event(event: str, token: str) -> None:
    _append("exec", f"{event} {token} {time.time():.3f} {os.getpid()}\n".encode())


def slow_sync(token: str) -> None:
    _slow_event("start", token)
    time.sleep(SLOW_S)
    _slow_event("end", token)


async def slow_async(token: str) -> None:
    _slow_event("start", token)
    await asyncio.sleep(SLOW_S)
    _slow_event("end", token)


def started(sent_at: str) -> None:
    """A latency job started: the seconds since ``sent_at`` (``time.time()`` just before the
    enqueue call, sent as the job's argument) in ``latency``, one line per job."""
    _append("latency", f"{time.time() - float(sent_at):.6f}\n".encode())


def io_sync() -> None:
    time.sleep(IO_S)
    done()


async def io_async() -> None:
    await asyncio.sleep(IO_S)
    done()
