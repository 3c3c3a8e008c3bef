"""A cap on the size of what Redis answers the operator.

One operator serves every JobQueue, and a JobQueue may name a Redis its author runs: that
server could answer the depth read with hundreds of megabytes and take the operator's memory,
and with it every other JobQueue. redis-py sets no limit on a reply, so the operator's
connections read through :class:`CappedHiredisParser`: more than :data:`MAX_REPLY_BYTES` in
one reply, or in all the replies of one read the operator makes (:func:`budget`: a pipeline of
a thousand replies is one read), fails the read (as any answer that is not Redis's does) and
the connection is dropped. What the operator reads is small: the depth script's numbers, the
worker registry, at most 1,001 ids of jobs in flight and their workers' ids.
"""

from __future__ import annotations

import contextvars
from typing import Any, Final

import redis.exceptions
from redis._parsers.hiredis import _AsyncHiredisParser

#: Longest reply the operator reads: far above the worker registry of 1,000 pods (about 0.3 MB).
MAX_REPLY_BYTES: Final = 8 * 1024 * 1024


#: Bytes left for the replies of the read under way in this task (set by :func:`budget`).
_LEFT: contextvars.ContextVar[list[int] | None] = contextvars.ContextVar("reply_budget",
                                                                         default=None)


def budget() -> contextvars.Token[list[int] | None]:
    """Starts a read: its replies share MAX_REPLY_BYTES from here (the tasks it starts too).
    Returns the token to end it with ``_LEFT.reset`` (:func:`end`)."""
    return _LEFT.set([MAX_REPLY_BYTES])


def end(token: contextvars.Token[list[int] | None]) -> None:
    _LEFT.reset(token)


class CappedHiredisParser(_AsyncHiredisParser):
    """redis-py's asyncio hiredis parser, counting the bytes each reply takes off the socket."""

    __slots__ = ("_reply_bytes",)

    def __init__(self, socket_read_size: int) -> None:
        super().__init__(socket_read_size)
        self._reply_bytes = 0

    async def read_response(self, disable_decoding: bool = False,  # type: ignore[override]
                            **options: Any) -> object:
        self._reply_bytes = 0
        # push_request as redis-py passes it: its parser takes one from 6.4 on, none before.
        return await super().read_response(disable_decoding=disable_decoding, **options)

    async def read_from_socket(self) -> bool:
        buffer = await self._stream.read(self._read_size)  # type: ignore[union-attr]
        if not buffer or not isinstance(buffer, bytes):
            raise redis.exceptions.ConnectionError("Connection closed by server.")
        self._reply_bytes += len(buffer)
        left = _LEFT.get()
        if left is not None:
            left[0] -= len(buffer)
        if self._reply_bytes > MAX_REPLY_BYTES or (left is not None and left[0] < 0):
            raise redis.exceptions.InvalidResponse(
                f"replies longer than {MAX_REPLY_BYTES} bytes: not read further")
        self._reader.feed(buffer)  # type: ignore[attr-defined]
        return True
