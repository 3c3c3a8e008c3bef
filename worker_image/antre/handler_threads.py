"""Plain ``def`` handlers, run in a pool of threads beside the worker's event loop.

A thread that returns starts the next prefetched job itself when the worker has *armed* one
(:meth:`HandlerThreads.arm`), as dramatiq's threads take their next message: the slot goes
straight on to the next handler, without the round of hand-offs through the event loop (the
result to the loop, the loop to a pool thread) that a busy machine makes wait for a core each
time. The armed runs, and those a thread took until the loop learns of it, behind one lock,
are the only state threads touch: the thread tells the loop what it returned and what it
started in one callback, and the loop keeps every other count. A run the worker takes back
(:meth:`disarm`, :meth:`disarm_all` at shutdown) is one no thread started.

A thread cannot be interrupted. When one overruns its job timeout, :meth:`HandlerThreads.wait`
raises :class:`ThreadTimeout` at once (the worker fails the run), and the thread is *overdue*:
it keeps its concurrency slot until it returns, so a stuck handler never has work piling up
behind it. Its resource lock stays held too: once the worker has settled the job keeping the
lock (:meth:`HandlerThreads.keep_lock`), the heartbeat extends the lock for as long as the
thread runs, and the thread's return frees it, so the next run on that resource never overlaps.
"""

from __future__ import annotations

import asyncio
import collections
import inspect
import threading
import time
from collections.abc import Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, TypeVar

from antre.protocol.extend_lease import KeptLock
from antre.runs import Run

#: Thread names start with this; ``antre worker`` exits without joining such threads.
THREAD_NAME_PREFIX = "antre-handler"

HandlerCall = tuple[Callable[[Any], Any], Any]
"""A handler and the job to call it with."""
#: What a thread's handler call ended with: its return value, or the exception it raised.
_Outcome = tuple[Any, BaseException | None]


T = TypeVar("T")


class ThreadTimeout(Exception):
    """A plain ``def`` handler overran its timeout and its thread is still running."""


class HandlerExit(Exception):
    """A handler raised SystemExit or KeyboardInterrupt: the failure of its run, like any other
    exception. Raised as they are, asyncio re-raises both out of the event loop, which would end
    the whole worker process (and in a thread, SystemExit never means the process anyway)."""

    def __init__(self, exc: BaseException) -> None:
        super().__init__(f"{type(exc).__name__}: {exc}")
        self.__cause__ = exc


def contained(exc: BaseException) -> BaseException:
    """What a handler raised, with SystemExit and KeyboardInterrupt as :class:`HandlerExit`."""
    return HandlerExit(exc) if isinstance(exc, SystemExit | KeyboardInterrupt) else exc


async def guarded(awaitable: Awaitable[T]) -> T:
    """Awaits a handler's coroutine; raises SystemExit and KeyboardInterrupt as
    :class:`HandlerExit`."""
    try:
        return await awaitable
    except (SystemExit, KeyboardInterrupt) as exc:
        raise HandlerExit(exc) from exc


async def within(awaitable: Awaitable[T], timeout_s: float | None) -> T:
    """Awaits a handler's coroutine in the calling task, for at most ``timeout_s`` (then
    TimeoutError). Not asyncio.wait_for: on Python 3.11 that runs it in a task of its own, which
    a handler catching its cancellation keeps going after a second cancellation has ended the
    caller's task, and a run's task ending is what frees the resource lock kept for it."""
    if timeout_s is None:
        return await awaitable
    async with asyncio.timeout(timeout_s):
        return await awaitable


@dataclass(slots=True, eq=False)
class _Thread:
    run: Run
    #: Resolved on the loop with what the handler returned.
    returned: asyncio.Future[Any]
    #: Monotonic time the job timeout passed, or None while within it.
    overdue_since: float | None = None
    #: The job was settled with its resource lock kept for this thread.
    keeps_lock: bool = False


class HandlerThreads:
    def __init__(self, concurrency: int, *, on_slot_freed: Callable[[], None],
                 on_lock_freed: Callable[[Run], None],
                 on_started: Callable[[Run, Any, asyncio.Future[Any], float], None]) -> None:
        self._executor = ThreadPoolExecutor(max_workers=concurrency,
                                            thread_name_prefix=THREAD_NAME_PREFIX)
        self._on_slot_freed = on_slot_freed
        #: Called when a thread that kept its run's lock returns: the lock is to be freed.
        self._on_lock_freed = on_lock_freed
        #: Called when a thread started an armed run: the run, its job, the future the thread's
        #: return resolves, and the monotonic time the handler started.
        self._on_started = on_started
        self._loop: asyncio.AbstractEventLoop | None = None
        #: Threads running a handler, as the loop knows them (only the loop touches this).
        self._threads: dict[Run, _Thread] = {}
        #: Prefetched runs a returning thread may start, oldest first; guarded by _armed_lock.
        self._armed: collections.OrderedDict[Run, HandlerCall] = collections.OrderedDict()
        #: Armed runs a thread took and started, until the loop learns of the start; guarded
        #: by _armed_lock. Their handler runs already: the loop must not take them for stopped.
        self._taken: set[Run] = set()
        #: Runs of _taken settled keeping their lock before the loop learnt of their start.
        self._keep_when_started: set[Run] = set()
        self._armed_lock = threading.Lock()

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
        """Whether ``run``'s handler thread has not returned yet (also when a thread took it
        from the armed runs and the loop has not learnt of that start yet)."""
        if run in self._threads:
            return True
        with self._armed_lock:
            return run in self._taken

    def kept_locks(self) -> list[KeptLock]:
        """The locks the heartbeat keeps extending: runs settled, threads still going."""
        return [lock for thread in self._threads.values()
                if thread.keeps_lock and (lock := thread.run.kept_lock) is not None]

    def keep_lock(self, run: Run) -> None:
        """The job of ``run`` was settled keeping its resource lock: hold the lock until the
        thread returns (at once, if it already has)."""
        thread = self._threads.get(run)
        if thread is not None:
            thread.keeps_lock = True
            return
        with self._armed_lock:
            if run in self._taken:  # started by a thread: the loop will learn of it
                self._keep_when_started.add(run)
                return
        self._on_lock_freed(run)

    # -- armed runs ------------------------------------------------------------------------

    def arm(self, run: Run, fn: Callable[[Any], Any], job: Any) -> None:
        """Lets the next thread that returns start ``run`` (a prefetched run, leased)."""
        with self._armed_lock:
            self._armed[run] = (fn, job)

    def disarm(self, run: Run) -> bool:
        """Takes ``run`` back: True if no thread started it (the caller now owns its start),
        False if one did (its start is on its way to ``on_started``)."""
        with self._armed_lock:
            return self._armed.pop(run, None) is not None

    def disarm_all(self) -> list[Run]:
        """Takes every armed run back (shutdown): no thread starts anything after this."""
        with self._armed_lock:
            runs = list(self._armed)
            self._armed.clear()
        return runs

    @property
    def armed(self) -> int:
        return len(self._armed)

    # -- running ---------------------------------------------------------------------------

    def start(self, run: Run, fn: Callable[[Any], Any], job: Any) -> asyncio.Future[Any]:
        """Runs ``fn(job)`` in a free thread; the future resolves with what it returned."""
        self._loop = loop = asyncio.get_running_loop()
        returned: asyncio.Future[Any] = loop.create_future()
        self._threads[run] = _Thread(run, returned)
        self._executor.submit(self._work, loop, run, fn, job)
        return returned

    async def wait(self, run: Run, returned: asyncio.Future[Any], timeout_s: float | None) -> None:
        """Waits for ``run``'s handler (started by :meth:`start` or by a returning thread);
        raises what it raised, or :class:`ThreadTimeout` once ``timeout_s`` has passed."""
        done, _ = await asyncio.wait({returned}, timeout=timeout_s)
        if not done:
            thread = self._threads.get(run)
            if thread is not None:
                thread.overdue_since = time.monotonic()
            raise ThreadTimeout
        result = returned.result()
        if inspect.isawaitable(result):  # a sync wrapper around a coroutine function
            await within(guarded(result), timeout_s)

    def _work(self, loop: asyncio.AbstractEventLoop, run: Run, fn: Callable[[Any], Any],
              job: Any) -> None:
        """In a pool thread: runs the handler, then each armed run it takes, until none is."""
        while True:
            outcome: _Outcome
            try:
                outcome = (fn(job), None)
            except BaseException as exc:  # handed to the loop, as a pool's future would
                outcome = (None, contained(exc))
            with self._armed_lock:
                taken = self._take_armed()
                # Under the lock: once the loop takes the armed runs back, every start a
                # thread made is already queued for it.
                started_at = time.monotonic()
                try:
                    loop.call_soon_threadsafe(self._returned, run, outcome, taken, started_at)
                except RuntimeError:  # the loop is closed: the process is ending
                    return
            if taken is None:
                return
            run, (fn, job) = taken

    def _take_armed(self) -> tuple[Run, HandlerCall] | None:
        """The oldest armed run still worth starting (under the lock). One found lost or given
        back is dropped; the worker skips it too."""
        while self._armed:
            taken = self._armed.popitem(last=False)
            if not (taken[0].lost or taken[0].released):
                self._taken.add(taken[0])
                return taken
        return None

    def _returned(self, run: Run, outcome: _Outcome,
                  taken: tuple[Run, HandlerCall] | None, started_at: float) -> None:
        """On the loop: ``run``'s thread returned, and started ``taken`` if not None."""
        thread = self._threads.pop(run)
        result, error = outcome
        if thread.overdue_since is None and not thread.returned.done():  # else nobody waits
            if error is None:
                thread.returned.set_result(result)
            else:
                thread.returned.set_exception(error)
        if taken is not None:
            next_run, (_, job) = taken
            assert self._loop is not None
            returned = self._loop.create_future()
            with self._armed_lock:
                self._taken.discard(next_run)
                keeps_lock = next_run in self._keep_when_started
                self._keep_when_started.discard(next_run)
            self._threads[next_run] = _Thread(next_run, returned, keeps_lock=keeps_lock)
            self._on_started(next_run, job, returned, started_at)
        if thread.overdue_since is not None:
            self._on_slot_freed()
        if thread.keeps_lock:
            self._on_lock_freed(run)

    def shutdown(self) -> None:
        """Stops taking work; threads still running are not waited for."""
        self.disarm_all()
        self._executor.shutdown(wait=False, cancel_futures=True)
