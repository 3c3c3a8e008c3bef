"""Plain ``def`` handlers, run in a pool of threads beside the worker's event loop.

A thread cannot be interrupted. When one overruns its job timeout, :meth:`HandlerThreads.call`
raises :class:`ThreadTimeout` at once (the worker fails the run), and the thread is counted as
*overdue*: it keeps its concurrency slot until it returns, so a stuck handler never has work
piling up behind it.
"""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

#: Thread names start with this; ``antre worker`` exits without joining such threads.
THREAD_NAME_PREFIX = "antre-handler"


class ThreadTimeout(Exception):
    """A plain ``def`` handler overran its timeout and its thread is still running."""


class HandlerThreads:
    def __init__(self, concurrency: int, *, on_slot_freed: Callable[[], None]) -> None:
        self._executor = ThreadPoolExecutor(max_workers=concurrency,
                                            thread_name_prefix=THREAD_NAME_PREFIX)
        self._on_slot_freed = on_slot_freed
        self._overdue: set[asyncio.Future[Any]] = set()

    @property
    def overdue(self) -> int:
        """Threads still running past their job timeout, each holding a slot."""
        return len(self._overdue)

    async def call(self, fn: Callable[[Any], Any], job: Any, timeout_s: float | None) -> None:
        loop = asyncio.get_running_loop()
        future = loop.run_in_executor(self._executor, fn, job)
        done, _ = await asyncio.wait({future}, timeout=timeout_s)
        if not done:
            self._overdue.add(future)

            def returned(_: asyncio.Future[Any]) -> None:
                self._overdue.discard(future)
                self._on_slot_freed()

            future.add_done_callback(returned)
            raise ThreadTimeout
        result = future.result()
        if inspect.isawaitable(result):  # a sync wrapper around a coroutine function
            await (asyncio.wait_for(result, timeout_s) if timeout_s is not None else result)

    def shutdown(self) -> None:
        """Stops taking work; threads still running are not waited for."""
        self._executor.shutdown(wait=False, cancel_futures=True)
