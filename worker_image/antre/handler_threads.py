"""Plain ``def`` handlers, run in a pool of threads beside the worker's event loop.

A thread cannot be interrupted. When one overruns its job timeout, :meth:`HandlerThreads.call`
raises :class:`ThreadTimeout` at once (the worker fails the run), and the thread is *overdue*:
it keeps its concurrency slot until it returns, so a stuck handler never has work piling up
behind it. Its resource lock stays held too: once the worker has settled the job keeping the
lock (:meth:`HandlerThreads.keep_lock`), the heartbeat extends the lock for as long as the
thread runs, and the thread's return frees it, so the next run on that resource never overlaps.
"""

from __future__ import annotations

import asyncio
import inspect
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from antre.protocol.extend_lease import KeptLock
from antre.runs import Run

#: Thread names start with this; ``antre worker`` exits without joining such threads.
THREAD_NAME_PREFIX = "antre-handler"


class ThreadTimeout(Exception):
    """A plain ``def`` handler overran its timeout and its thread is still running."""


@dataclass(slots=True, eq=False)
class _Thread:
    run: Run
    #: Monotonic time the job timeout passed, or None while within it.
    overdue_since: float | None = None
    #: The job was settled with its resource lock kept for this thread.
    keeps_lock: bool = False


class HandlerThreads:
    def __init__(self, concurrency: int, *, on_slot_freed: Callable[[], None],
                 on_lock_freed: Callable[[Run], None]) -> None:
        self._executor = ThreadPoolExecutor(max_workers=concurrency,
                                            thread_name_prefix=THREAD_NAME_PREFIX)
        self._on_slot_freed = on_slot_freed
        #: Called when a thread that kept its run's lock returns: the lock is to be freed.
        self._on_lock_freed = on_lock_freed
        self._threads: dict[Run, _Thread] = {}

    @property
    def overdue(self) -> int:
        """Threads still running past their job timeout, each holding a slot."""
        return sum(1 for thread in self._threads.values() if thread.overdue_since is not None)

    def overdue_for_s(self) -> list[float]:
        """How long each overdue thread has run past its timeout, in seconds."""
        now = time.monotonic()
        return [now - thread.overdue_since for thread in self._threads.values()
                if thread.overdue_since is not None]

    def running(self, run: Run) -> bool:
        """Whether ``run``'s handler thread has not returned yet."""
        return run in self._threads

    def kept_locks(self) -> list[KeptLock]:
        """The locks the heartbeat keeps extending: runs settled, threads still going."""
        return [(thread.run.claimed.resource_key, f"{thread.run.claimed.id}:{thread.run.claimed.lease}")
                for thread in self._threads.values()
                if thread.keeps_lock and thread.run.claimed.resource_key]

    def keep_lock(self, run: Run) -> None:
        """The job of ``run`` was settled keeping its resource lock: hold the lock until the
        thread returns (at once, if it already has)."""
        thread = self._threads.get(run)
        if thread is None:
            self._on_lock_freed(run)
        else:
            thread.keeps_lock = True

    async def call(self, run: Run, fn: Callable[[Any], Any], job: Any,
                   timeout_s: float | None) -> None:
        loop = asyncio.get_running_loop()
        future = loop.run_in_executor(self._executor, fn, job)
        thread = self._threads[run] = _Thread(run)

        def returned(_: asyncio.Future[Any]) -> None:
            del self._threads[run]
            if thread.overdue_since is not None:
                self._on_slot_freed()
            if thread.keeps_lock:
                self._on_lock_freed(run)

        future.add_done_callback(returned)
        done, _ = await asyncio.wait({future}, timeout=timeout_s)
        if not done:
            thread.overdue_since = time.monotonic()
            raise ThreadTimeout
        result = future.result()
        if inspect.isawaitable(result):  # a sync wrapper around a coroutine function
            await (asyncio.wait_for(result, timeout_s) if timeout_s is not None else result)

    def shutdown(self) -> None:
        """Stops taking work; threads still running are not waited for."""
        self._executor.shutdown(wait=False, cancel_futures=True)
