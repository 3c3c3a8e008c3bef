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
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import socket
from typing import Any, Final

#: Threads for lookups: each name that hangs holds one, so this many can hang before a lookup
#: of another name waits. Idle threads cost nothing and are only started when needed.
LOOKUP_THREADS: Final = 64

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
        self._lookups: dict[_Lookup, asyncio.Future[Any]] = {}

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
            lookup = self.run_in_executor(self._lookup_threads, socket.getaddrinfo, *key)
            self._lookups[key] = lookup
            lookup.add_done_callback(lambda done: self._finished(key, done))
        # Shielded: a caller cancelled by its own timeout must not cancel the others' lookup.
        return await asyncio.shield(lookup)

    def _finished(self, key: _Lookup, lookup: asyncio.Future[Any]) -> None:
        self._lookups.pop(key, None)
        if not lookup.cancelled():
            lookup.exception()  # retrieved here: every caller may have given up on it

    def close(self) -> None:
        super().close()
        self._lookup_threads.shutdown(wait=False, cancel_futures=True)
