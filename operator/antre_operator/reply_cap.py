"""Caps on what Redis answers the operator: per read, and for all reads of the process together.

One operator serves every JobQueue, and a JobQueue may name a Redis its author runs. redis-py
sets no limit on a reply, and hiredis builds a reply's objects as its bytes arrive, reserving
room for the declared length of each array (and set, and push) up front: measured, 8 KB of
nested ``*16000`` headers took 69 MiB, and 7.6 MiB of empty arrays 153 MiB. A byte count is no
cap on memory, so the operator's connections read through :class:`CappedHiredisParser`, which
charges each chunk before hiredis sees it with :func:`cost`, an estimate never below what the
chunk can take once parsed: 2 bytes per byte (the bytes, then the strings made of them), 96 per
line (the largest object hiredis makes for the shortest element, an empty array or map: a map of
one entry in three lines took 229 bytes with hiredis 3.5 and 285 with 2.2.1), 8
per element an array, set or push header declares, 256 more per set (an empty one took 224
bytes with hiredis 2.2.1), and 768 more per error line and 32 more per byte of it: redis-py makes
each error line an exception (337 bytes; 610 for a ``MOVED`` or ``ASK``, whose address it
parses, with redis-py 8.1), and splits its text into words (26 bytes per byte of ``ab ab ...``).
The error lines were once charged as any line: 8 JobQueues stalling in replies of ``MOVED``
lines grew the process by 134 MiB beyond the budget below.

Every read has a cap of its own, by what it reads, several times what a Redis running antre
answers (its costs measured by ``tests/operator/test_backlog_reader.py::
test_what_redis_answers_costs_a_fraction_of_each_cap``):

* the depth script (:data:`DEPTH_CAP`, 64 KiB): ten numbers and the stats Hash's counters,
  6 KiB (20 KiB for a new connection's first read: its handshake, two commands of which Redis
  7.0 answers redis-py 8.1 with errors, and ``NOSCRIPT`` before the script's load);
* ``INFO memory`` (:data:`INFO_CAP`, 64 KiB): 1.4 KB in 52 lines, 8 KiB;
* the worker registry (:data:`REGISTRY_CAP`, 4 MiB): 1,000 workers whose pod names take all
  63 characters a pod's host name has, of a queue whose name takes all 128, 1.8 MiB;
* the ids of at most 1,001 jobs in flight (:data:`IN_FLIGHT_IDS_CAP`, 1 MiB): 0.45 MiB at 128
  bytes each, the longest a job id may be;
* the worker holding each of at most 1,000 of them (:data:`HOLDERS_CAP`, 1 MiB): 0.35 MiB.

The last three are one read (:data:`IN_FLIGHT_CAP`): the registry is held while the rest is
read. A read over its cap fails, as any answer that is not Redis's does, and its connection is
dropped, and with it what the parser held.

Two reads of a JobQueue's client happen inside any of the above, whenever the client needs
them, and are reads of their own (``start(..., apart=True)``), not charged to the read under
way, whose cap they would outgrow:

* a cluster client's discovery of its nodes (:data:`TOPOLOGY_CAP`, 8 MiB): ``CLUSTER SLOTS``
  and ``COMMAND`` (every command's key positions), 2.1 MiB from Redis 7.0 (1.7 MiB to redis-py
  5.0, which asks in RESP2: no sets), almost all of it ``COMMAND``'s 90 KB in 15,000 lines.
  redis-py keeps what it says as long as the client lives, outside every budget, so what
  ``COMMAND`` may list is bounded (:mod:`capped_redis`); the cap leaves room for the commands
  of modules (Redis 8 ships several, Redis Stack more), which a cluster here did not have;
* each reply of a Sentinel (:data:`SENTINEL_CAP`, 4 MiB), read by :class:`CappedSentinelParser`:
  ``SENTINEL MASTERS``, which redis-py asks for the primary, 9.2 KiB per primary the Sentinel
  watches: 440 of them fit (at 2 MiB, a Sentinel watching more than about 220 failed every
  read).

Reads also share :data:`SHARED_BYTES` for the part of their cost above :data:`FREE_BYTES`, so
many reads at once (JobQueues of one author whose Redis answers just under a cap and never
finishes) cannot add up to more than the process has. The first FREE_BYTES of a read are not
drawn from it: depth and INFO reads fit, and never fail for it whatever other JobQueues do (they
cost at most FREE_BYTES per JobQueue reading at that moment). When the shared budget is full, the
reads that started first make way for the new one (:func:`to_fail`): a read that stalls grows
old, while one that goes on at its Redis's speed ends long before reads started after it bring
32 MiB. So a registry read of 1,000 workers succeeds while any number of hostile reads hold the
budget. A budget per JobQueue alone would not bound the sum, one global budget alone would let
a few stalled reads take it for every JobQueue, and a fair share of it (the budget over the
reads holding it) would shrink below one large registry with a dozen of them.
"""

from __future__ import annotations

import asyncio
import contextvars
import dataclasses
import itertools
import re
from collections.abc import Iterator, Sequence
from typing import Any, Final, TypeVar

import redis.asyncio.cluster
import redis.exceptions
from redis._parsers.hiredis import _AsyncHiredisParser

#: The parts of :func:`cost` (see the module's docstring).
BYTE_COST: Final = 2
LINE_COST: Final = 96
ELEMENT_COST: Final = 8
SET_COST: Final = 256
ERROR_LINE_COST: Final = 768
ERROR_BYTE_COST: Final = 32

#: Caps per read, in :func:`cost` (what Redis answers costs in the module's docstring).
DEPTH_CAP: Final = 64 * 1024
INFO_CAP: Final = 64 * 1024
REGISTRY_CAP: Final = 4 * 1024 * 1024
IN_FLIGHT_IDS_CAP: Final = 1024 * 1024
HOLDERS_CAP: Final = 1024 * 1024
IN_FLIGHT_CAP: Final = REGISTRY_CAP + IN_FLIGHT_IDS_CAP + HOLDERS_CAP
TOPOLOGY_CAP: Final = 8 * 1024 * 1024
SENTINEL_CAP: Final = 4 * 1024 * 1024
#: Replies read outside any read of the operator's (none are: a backstop, per reply).
OTHER_CAP: Final = 64 * 1024

#: What every read may cost before it draws on the shared budget: depth and INFO reads fit.
FREE_BYTES: Final = 64 * 1024
#: The budget shared by every read's cost above FREE_BYTES.
SHARED_BYTES: Final = 32 * 1024 * 1024

#: An array, set or push header: ``*``, ``~`` or ``>``, a count, CRLF. hiredis reserves room for
#: the count at once; maps and attributes grow as their elements come. Longer counts than 20
#: digits are refused by hiredis itself.
_RESERVING_HEADER: Final = re.compile(rb"([*~>])(\d{1,20})\r\n")
#: The longest header: a header split between two chunks is found in the second one's.
_LONGEST_HEADER: Final = 1 + 20 + 2
#: An error line, from the newline before it (or one up to its end that a chunk holds).
_ERROR_LINE: Final = re.compile(rb"\n-[^\n]*")


class Tally:
    """What the chunks of one connection cost, in the order they come: :func:`cost` of each,
    given what came before it (a header split between two chunks, an error line's text going
    on in the next one). Text inside strings that looks like a header or an error line is
    counted as one: too much, never too little."""

    __slots__ = ("_in_error", "_tail")

    def __init__(self) -> None:
        self._tail = b"\n"  # a connection's first byte starts a line
        self._in_error = False

    def cost(self, chunk: bytes) -> int:
        """An estimate of the memory ``chunk`` can take once hiredis parsed it, never below it."""
        text = self._tail + chunk
        carried = len(self._tail)
        reserved = sets = 0
        for header in _RESERVING_HEADER.finditer(text):
            if header.end() > carried:  # one ending in the tail was counted
                reserved += int(header.group(2))
                sets += header.group(1) == b"~"
        errors = error_bytes = 0
        if self._in_error:  # an error line begun chunks ago, going on in this one
            end = chunk.find(b"\n")
            error_bytes += len(chunk) if end < 0 else end
        # A line starting in this chunk, or right after the tail's last newline.
        for line in _ERROR_LINE.finditer(text, carried - 1):
            errors += 1
            error_bytes += line.end() - line.start()
        last_line = text.rfind(b"\n", carried - 1)
        if last_line >= 0:
            self._in_error = text[last_line + 1:last_line + 2] == b"-"
        self._tail = text[-(_LONGEST_HEADER - 1):]
        return (BYTE_COST * len(chunk) + LINE_COST * chunk.count(b"\n")
                + ELEMENT_COST * reserved + SET_COST * sets + ERROR_LINE_COST * errors
                + ERROR_BYTE_COST * error_bytes)


def cost(reply: bytes) -> int:
    """An estimate of the memory ``reply``, the first bytes of a connection, can take once
    hiredis parsed it (:class:`Tally`)."""
    return Tally().cost(reply)


Holder = TypeVar("Holder")


def to_fail(held: Sequence[tuple[Holder, int]], wanted: Holder, more: int,
            limit: int) -> list[Holder] | None:
    """The reads to fail so that ``wanted`` may draw ``more`` from a budget of ``limit``, or
    None when ``wanted`` is the one to fail. ``held``: every read holding part of the budget
    and how much, in the order they started, ``wanted`` among them (with 0 if it holds none).

    When the budget has no room, the reads that started first make way, and only reads that
    started before ``wanted``: a read that stalls grows old, and one that goes on at a Redis's
    speed ends before reads started after it can bring the whole budget."""
    used = sum(size for _, size in held)
    failed = []
    for read, size in held:
        if used + more <= limit:
            break
        if read is wanted:
            return None
        failed.append(read)
        used -= size
    return failed


#: The order reads start in.
_STARTS: Final[Iterator[int]] = itertools.count()


@dataclasses.dataclass(eq=False)
class Read:
    """One read the operator makes, or a part of one (``parent``), and what its replies cost.
    A whole read (no parent) also holds its part of the shared budget and can be failed."""

    cap: int
    parent: Read | None = None
    started: int = dataclasses.field(default_factory=lambda: next(_STARTS))
    cost: int = 0
    shared: int = 0
    """What this read holds of the shared budget."""
    failed: str | None = None
    streams: set[asyncio.StreamReader] = dataclasses.field(default_factory=set)
    """The connections' streams its parsers wait on: failed by another read, it is woken."""

    def whole(self) -> Read:
        read = self
        while read.parent is not None:
            read = read.parent
        return read


class _Shared:
    """The budget shared by every read of the process (:data:`SHARED_BYTES`)."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.held: dict[Read, int] = {}

    def take(self, read: Read, more: int) -> str | None:
        """Draws ``more`` for the whole read ``read``, failing older reads if need be
        (:func:`to_fail`); returns why ``read`` fails instead, if it does."""
        held = self.held if read in self.held else {**self.held, read: 0}
        failed = to_fail(sorted(held.items(), key=lambda item: item[0].started), read, more,
                         self.limit)
        if failed is None:
            return (f"replies beyond the operator's reply budget of {self.limit} bytes, held "
                    "by reads started since this one")
        for other in failed:
            fail(other, "replies beyond the operator's reply budget: the reads that started "
                        "first made way for newer ones")
        read.shared = self.held[read] = read.shared + more
        return None

    def give_back(self, read: Read) -> None:
        self.held.pop(read, None)
        read.shared = 0


SHARED: Final = _Shared(SHARED_BYTES)

#: The read under way in this task (set by :func:`start`; tasks started meanwhile share it).
_CURRENT: contextvars.ContextVar[Read | None] = contextvars.ContextVar("redis_read",
                                                                      default=None)


def fail(read: Read, why: str) -> None:
    """Fails the whole read ``read``: the chunk it waits for, or its next one, fails, and what
    it held of the shared budget is given back (its connection, dropped, frees the memory)."""
    read.failed = why
    SHARED.give_back(read)
    for stream in read.streams:
        stream.set_exception(redis.exceptions.InvalidResponse(why))
    read.streams.clear()


def start(cap: int, *, apart: bool = False) -> contextvars.Token[Read | None]:
    """Starts a read of at most ``cap``: the replies read from here in this task (and the tasks
    it starts) are charged to it, and to the read it is part of if one is under way (unless
    ``apart``: then to this one alone, a whole read with its own share of the budget). End it
    with :func:`end`."""
    return _CURRENT.set(Read(cap, parent=None if apart else _CURRENT.get()))


def end(token: contextvars.Token[Read | None]) -> None:
    read = _CURRENT.get()
    _CURRENT.reset(token)
    if read is not None and read.parent is None:
        SHARED.give_back(read)  # what it read is the caller's now, or freed with its connection


def charge(read: Read, more: int) -> str | None:
    """Charges ``more`` to ``read`` and the reads it is part of; why it fails, if it does."""
    whole = read.whole()
    if whole.failed is not None:
        return whole.failed
    part: Read | None = read
    while part is not None:
        if part.cost + more > part.cap:
            return f"replies costing more than {part.cap} bytes: not read further"
        part = part.parent
    wanted = max(0, whole.cost + more - FREE_BYTES) - whole.shared
    if wanted > 0:
        why = SHARED.take(whole, wanted)
        if why is not None:
            return why
    part = read
    while part is not None:
        part.cost += more
        part = part.parent
    return None


class CappedHiredisParser(_AsyncHiredisParser):
    """redis-py's asyncio hiredis parser, charging each chunk to the read under way before
    hiredis parses it, and dropping what hiredis held with the connection."""

    __slots__ = ("_other", "_tally")

    def __init__(self, socket_read_size: int) -> None:
        super().__init__(socket_read_size)
        self._tally = Tally()
        self._other = Read(OTHER_CAP)

    def on_connect(self, connection: Any) -> None:
        super().on_connect(connection)  # type: ignore[no-untyped-call]
        self._tally = Tally()

    def on_disconnect(self) -> None:
        super().on_disconnect()  # type: ignore[no-untyped-call]
        # redis-py keeps the reader, and the reply it was in the middle of, until the next
        # connect: up to a cap's worth per JobQueue between polls, counted by no read.
        self._reader = None
        self._tally = Tally()

    async def read_response(self, disable_decoding: bool = False,  # type: ignore[override]
                            **options: Any) -> object:
        self._other.cost = 0
        # push_request as redis-py passes it: its parser takes one from 6.4 on, none before.
        return await super().read_response(disable_decoding=disable_decoding, **options)

    async def read_from_socket(self) -> bool:
        read = _CURRENT.get() or self._other
        stream, waiting = self._stream, read.whole().streams
        if stream is None or self._reader is None:  # disconnected meanwhile
            raise redis.exceptions.ConnectionError("Connection closed.")
        waiting.add(stream)
        try:
            buffer = await stream.read(self._read_size)
        finally:
            waiting.discard(stream)
        if not buffer or not isinstance(buffer, bytes):
            raise redis.exceptions.ConnectionError("Connection closed by server.")
        why = charge(read, self._tally.cost(buffer))
        if why is not None or self._reader is None:
            raise redis.exceptions.InvalidResponse(why or "Connection closed.")
        self._reader.feed(buffer)
        return True


class CappedClusterParser(CappedHiredisParser):
    """:class:`CappedHiredisParser` for a cluster's nodes: their redirections (``MOVED``,
    ``ASK``...) raised as redis-py's errors for them, which its cluster client follows. redis-py
    5 kept those in a parser of its cluster client's; later releases have them in every parser."""

    __slots__ = ()

    EXCEPTION_CLASSES = getattr(redis.asyncio.cluster, "ClusterParser",
                                CappedHiredisParser).EXCEPTION_CLASSES


class CappedSentinelParser(CappedHiredisParser):
    """:class:`CappedHiredisParser` for the connections to Sentinels: each reply a read of its
    own of at most :data:`SENTINEL_CAP`. redis-py asks the Sentinels inside whatever read needs
    a connection to the primary (a depth read's 64 KiB), whose cap a Sentinel watching a few
    dozen primaries outgrows."""

    __slots__ = ()

    async def read_response(self, disable_decoding: bool = False,  # type: ignore[override]
                            **options: Any) -> object:
        read = start(SENTINEL_CAP, apart=True)
        try:
            return await super().read_response(disable_decoding=disable_decoding, **options)
        finally:
            end(read)
