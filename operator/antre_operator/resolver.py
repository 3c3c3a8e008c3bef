"""Host name lookups that one JobQueue cannot hold up for the others.

asyncio resolves a name with ``socket.getaddrinfo`` on the loop's default executor, which has
``min(32, CPUs + 4)`` threads: 6 on 2 cores. A JobQueue whose Redis host name hangs in DNS (a
nameserver that drops queries blocks each lookup for the resolver's whole timeout, 5 s per
attempt and nameserver) starts a new lookup at every poll while the last one still blocks, since
the poll's own timeout cancels only its wait, not the thread. A few such JobQueues fill the
executor, and every other JobQueue's connection to its Redis then waits behind them.

:class:`ResolvingLoop` runs each distinct lookup at most once at a time, shared by every caller
that asks for it meanwhile (a caller that gives up leaves it running for the others), on threads
of its own. A lookup is shared by host name, whatever the port (filled in after), so a name that
hangs holds one thread, whatever its JobQueues do.

Distinct names still took a thread each, and a JobQueue author has as many as they like: one
JobQueue per name, a Sentinel URL of many hosts, a Sentinel of their own naming a new host at
every poll. 64 of them used to fill the 64 threads. So each lookup also counts for the JobQueue
that started it (:func:`lookups_for`, which its reads set): a JobQueue has at most
:data:`LOOKUPS_PER_JOBQUEUE` going at once, and a further one fails at once as a name that does
not resolve does. The threads for JobQueues' lookups start as needed, up to
:data:`LOOKUP_THREADS`, which therefore holds the names of 128 JobQueues hanging at once before a
lookup of another JobQueue waits; lookups of no JobQueue (kopf's) have threads of their own.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import contextvars
import socket
from collections.abc import Hashable, Iterator
from typing import Any, Final

#: Lookups of one JobQueue going at once: a hanging name holds one until the resolver gives up.
#: A Sentinel URL's hosts are looked up one after the other, so this leaves room for a few of
#: them hanging while the next is asked.
LOOKUPS_PER_JOBQUEUE: Final = 4
#: Threads for JobQueues' lookups, started as needed (about 20 KiB each while they block), far
#: below the process limits a cluster may set on a pod.
LOOKUP_THREADS: Final = 512
#: Threads for lookups of no JobQueue (kopf's, of the API server): no JobQueue's hold them.
OTHER_LOOKUP_THREADS: Final = 8

#: The JobQueue whose lookups the task makes (None: none's).
_JOBQUEUE: contextvars.ContextVar[Hashable | None] = contextvars.ContextVar(
    "lookups_for", default=None)


@contextlib.contextmanager
def lookups_for(jobqueue: Hashable) -> Iterator[None]:
    """The lookups made in this task meanwhile (and in the tasks it starts) are ``jobqueue``'s."""
    token = _JOBQUEUE.set(jobqueue)
    try:
        yield
    finally:
        _JOBQUEUE.reset(token)


def may_start(going: int) -> bool:
    """Whether a JobQueue with ``going`` lookups under way may start another."""
    return going < LOOKUPS_PER_JOBQUEUE

_Lookup = tuple[Any, Any, int, int, int, int]


def _port_number(port: Any) -> int | None:
    """``port`` as getaddrinfo would put it in an address: a number (0 for none), or None for a
    service name."""
    if port is None:
        return 0
    if isinstance(port, int):
        return port
    text = port.decode() if isinstance(port, bytes) else str(port)
    return int(text) if text.isascii() and text.isdigit() else None


class ResolvingLoop(asyncio.SelectorEventLoop):
    """The event loop the operator runs in (see the module's docstring)."""

    def __init__(self) -> None:
        super().__init__()
        self._lookup_threads = concurrent.futures.ThreadPoolExecutor(
            max_workers=LOOKUP_THREADS, thread_name_prefix="antre-operator-dns")
        self._other_lookup_threads = concurrent.futures.ThreadPoolExecutor(
            max_workers=OTHER_LOOKUP_THREADS, thread_name_prefix="antre-operator-dns-other")
        self._lookups: dict[_Lookup, asyncio.Future[Any]] = {}
        self._going: dict[Hashable, int] = {}
        """The lookups each JobQueue started that have not ended (a thread each)."""

    async def getaddrinfo(self, host: Any, port: Any, *, family: int = 0, type: int = 0,
                          proto: int = 0, flags: int = 0) -> Any:
        number = _port_number(port)
        if number is None or host is None:  # a service name, or this host's own addresses
            return await self._shared((host, port, family, type, proto, flags))
        # Looked up without the port, which is filled in after: one hanging name asked for on
        # many ports (a Sentinel URL lists several) must still hold a single thread.
        found = await self._shared((host, None, family, type, proto, flags))
        return [(family_, type_, proto_, name, (address[0], number, *address[2:]))
                for family_, type_, proto_, name, address in found]

    async def _shared(self, key: _Lookup) -> Any:
        lookup = self._lookups.get(key)
        if lookup is None:
            jobqueue = _JOBQUEUE.get()
            if jobqueue is None:
                lookup = self.run_in_executor(self._other_lookup_threads, socket.getaddrinfo,
                                              *key)
            elif may_start(self._going.get(jobqueue, 0)):
                lookup = self.run_in_executor(self._lookup_threads, socket.getaddrinfo, *key)
                self._going[jobqueue] = self._going.get(jobqueue, 0) + 1
            else:
                raise socket.gaierror(
                    socket.EAI_AGAIN, f"not looked up: {LOOKUPS_PER_JOBQUEUE} other lookups of "
                    "this JobQueue's names have not ended")
            self._lookups[key] = lookup
            lookup.add_done_callback(lambda done: self._finished(key, jobqueue, done))
        # Shielded: a caller cancelled by its own timeout must not cancel the others' lookup.
        return await asyncio.shield(lookup)

    def _finished(self, key: _Lookup, jobqueue: Hashable | None,
                  lookup: asyncio.Future[Any]) -> None:
        self._lookups.pop(key, None)
        if jobqueue is not None:
            going = self._going.pop(jobqueue, 1) - 1
            if going:
                self._going[jobqueue] = going
        if not lookup.cancelled():
            lookup.exception()  # retrieved here: every caller may have given up on it

    def close(self) -> None:
        super().close()
        self._lookup_threads.shutdown(wait=False, cancel_futures=True)
        self._other_lookup_threads.shutdown(wait=False, cancel_futures=True)
