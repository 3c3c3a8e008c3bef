"""One connection of an asyncio client's pool kept for one of the worker's loops, its commands
written and its replies read without redis-py's per-call layers.

A worker whose jobs arrive one at a time makes two round trips per job: the claim behind its
blocking wait (:mod:`antre.idle_wait`) and the ack (:mod:`antre.ack_batcher`). Through redis-py's
asyncio client each one took a connection from the pool and gave it back (a lock, the
connection-count metrics hooks), wrapped the socket write in ``asyncio.wait_for`` (a task of
its own, so an extra turn of the event loop), and scheduled and cancelled a timeout around
every reply it read: a script call cost about 110 us of CPU here against 35 us written to the
transport and read from the connection's parser. :class:`DirectConnection` takes one
connection from the pool for a caller that makes one call at a time and does the latter.

What stays as redis-py does it: the bytes written (hiredis packs them, as the connections of
:mod:`antre.command_packing` do, and redis-py's packer takes what hiredis does not), the
connection's retry policy around a script call (a dropped connection is dialled again and the
call sent again, as redis-py resends any command: every script the worker sends this way is safe
to resend), its health check (a send on a connection idle past ``health_check_interval`` goes
through redis-py, which PINGs first), a connection a maintenance notification marked for
reconnecting dialled again, connecting, and the errors raised. One deadline, the
socket timeout, bounds each reply read; a reply not read by then closes the connection and
raises redis-py's ``TimeoutError``. The parser still handles RESP3 push messages as it reads
(redis-py 8 speaks RESP3 by default). Connections whose class changes how commands are sent or
replies read (Sentinel's turns a READONLY reply into a reconnect to the new primary), and
whatever lacks the connection internals this relies on, are driven through the connection's own
``send_packed_command`` and ``read_response`` instead; durable ops (WAIT) and clients other than
a single-node asyncio client go through :func:`scripts.run_async`.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
from collections.abc import Sequence
from typing import Any, TypeVar

import hiredis
import redis
import redis.asyncio
import redis.asyncio.connection

from antre import errors
from antre.protocol import scripts

T = TypeVar("T")

_REDIS_PY_CONNECTION: Any = redis.asyncio.connection.AbstractConnection
#: A timer may run up to the loop's clock resolution early: a read this close to its deadline
#: when the timer runs counts as late.
_EARLY_S = 0.001


def _drives_directly(connection: Any) -> bool:
    """Whether ``connection`` sends and reads as redis-py's base class does, with the internals
    (stream writer, parser) this module writes to and reads from."""
    kind = type(connection)
    return (getattr(kind, "read_response", None) is _REDIS_PY_CONNECTION.read_response
            and getattr(kind, "send_packed_command", None)
            is _REDIS_PY_CONNECTION.send_packed_command
            and all(hasattr(connection, name) for name in ("_reader", "_writer", "_parser"))
            and hasattr(connection, "next_health_check"))


class DirectConnection:
    """Not for concurrent use: one call at a time (each of the worker's loops has its own)."""

    def __init__(self, client: Any) -> None:
        self.client = client
        self._connection: Any = None
        self._direct = False
        #: The deadline of the reply being read (loop time), None between reads; one timer,
        #: left armed between reads, closes the connection once a read passes its deadline.
        self._reading_until: float | None = None
        self._timer: asyncio.TimerHandle | None = None
        #: The loop the timer runs on: one left on a loop that has ended never runs.
        self._timer_loop: asyncio.AbstractEventLoop | None = None
        self._timed_out = False
        #: :meth:`run` found the connection needs redis-py's layers: script calls go through
        #: the client.
        self._through_client = False

    async def connection(self) -> Any:
        """The kept connection, taken from the pool on first use."""
        if self._connection is None:
            pool = self.client.connection_pool
            try:
                self._connection = await pool.get_connection()
            except TypeError:  # redis-py before 5.3 wants a command name
                self._connection = await pool.get_connection("EVALSHA")
            self._direct = _drives_directly(self._connection)
        return self._connection

    async def send(self, commands: Sequence[Sequence[scripts.ScriptArg]]) -> None:
        """Writes ``commands`` in one write (connecting first if the connection is closed);
        redis-py's errors, the connection closed after a failure."""
        connection = await self.connection()
        try:
            # What the connection's packer calls in the end (antre.command_packing), without
            # redis-py's pass over every argument: 13 us less per idle wait here.
            # (The stub types the argument as a 1-tuple.)
            packed = [b"".join([hiredis.pack_command(tuple(command))  # type: ignore[arg-type]
                                for command in commands])]
        except TypeError:  # an argument hiredis does not take: redis-py packs or refuses it
            packed = connection.pack_commands(commands)
        if self._direct and connection.is_connected and connection._reader.at_eof():
            # The server closed it while it was idle (a restart, a timeout, CLIENT KILL): dial
            # again rather than fail a call Redis never saw, as the pool checks what it hands out.
            await self._close()
        should_reconnect = getattr(connection, "should_reconnect", None)
        if should_reconnect is not None and should_reconnect():
            # A MOVING maintenance notification (Redis Enterprise, Redis Cloud) marks it to be
            # dialled again, which the pool does when a connection is given back; this one is
            # kept between calls, so it is dialled again here.
            await self._close()
        if not (self._direct and connection.is_connected
                and not self._health_check_due(connection)):
            await connection.send_packed_command(packed)
            return
        writer = connection._writer
        try:
            writer.writelines(packed)
            if writer.transport.get_write_buffer_size():  # Redis is not reading: bounded wait
                await asyncio.wait_for(writer.drain(), connection.socket_timeout)
        except BaseException as exc:
            await self._close()
            if isinstance(exc, asyncio.TimeoutError):
                raise redis.TimeoutError("Timeout writing to socket") from None
            if isinstance(exc, OSError):
                raise redis.ConnectionError(f"Error while writing to socket: {exc}") from exc
            raise

    async def read(self, timeout_s: float | None = None) -> Any:
        """The next reply, within ``timeout_s`` (None: the socket timeout); an error reply is
        raised (``redis.ResponseError``), as are a timeout and a lost connection (redis-py's
        errors, the connection closed)."""
        connection = self._connection
        if not self._direct:
            if timeout_s is None:
                return await connection.read_response()
            # redis-py answers None for a read past a timeout given here, the connection kept
            # with the reply still to come (then read as the next call's): a deadline of our
            # own instead, the read cancelled by it closing the connection.
            try:
                async with asyncio.timeout(timeout_s):
                    return await connection.read_response(timeout=math.inf)
            except TimeoutError:
                await self._close()
                raise redis.TimeoutError("Timeout reading from socket") from None
        loop = asyncio.get_running_loop()
        limit = timeout_s if timeout_s is not None else connection.socket_timeout
        if limit:
            self._read_until(loop, loop.time() + limit)
        try:
            reply = await connection._parser.read_response()
        except BaseException as exc:
            timed_out, self._timed_out = self._timed_out, False
            await self._close()
            if timed_out:
                raise redis.TimeoutError("Timeout reading from socket") from None
            if isinstance(exc, OSError):
                raise redis.ConnectionError(f"Error while reading from socket: {exc}") from exc
            raise
        finally:
            self._reading_until = None
        if self._timed_out:
            # The timer ran in the turn the reply came in (the loop held past the deadline): the
            # reply is whole, the transport closed under it. Closed here, the next call dials
            # again, and no later read that fails is taken for this one's timeout.
            self._timed_out = False
            await self._close()
        if connection.health_check_interval:
            connection.next_health_check = loop.time() + connection.health_check_interval
        if isinstance(reply, redis.ResponseError):
            raise reply
        return reply

    async def run(self, op: scripts.Op[T]) -> T:
        """Runs ``op`` as :func:`scripts.run_async` does (same errors): on this connection when
        it is driven directly, else through the client as before."""
        if op.durable is not None or self._through_client:
            return await scripts.run_async(self.client, op)
        if not isinstance(self.client, redis.asyncio.Redis):  # a cluster client has no pool
            self._through_client = True
            return await scripts.run_async(self.client, op)
        connection = await self.connection()
        if not self._direct:  # redis-py's own layers are needed: keep no connection for it
            self._through_client = True
            await self.release()
            return await scripts.run_async(self.client, op)
        command = scripts.evalsha_command(op)

        async def call() -> Any:
            await self.send((command,))
            return await self.read()

        async def failed(_error: Exception) -> None:
            await self._close()

        try:
            reply = await connection.retry.call_with_retry(call, failed)
        except redis.ResponseError as exc:
            if scripts.is_noscript(exc):  # EVAL loads it for next time
                return await scripts.run_async(self.client, op)
            raise scripts.translate_error(exc) from None
        except (redis.ConnectionError, redis.TimeoutError) as exc:
            raise errors.RedisUnavailable(f"Redis is unreachable: {exc}") from exc
        return op.parse(reply)

    async def drop(self) -> None:
        """Closes the connection and gives it back (a half-read one must never be reused: its
        next reply would be an earlier call's); the next call takes one again."""
        await self._close()
        await self.release()

    async def release(self) -> None:
        """Gives the connection back to the pool; the next call takes one again."""
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        connection, self._connection = self._connection, None
        if connection is not None:
            with contextlib.suppress(Exception):
                await self.client.connection_pool.release(connection)

    async def _close(self) -> None:
        if self._connection is not None:
            with contextlib.suppress(Exception):
                await self._connection.disconnect(nowait=True)

    @staticmethod
    def _health_check_due(connection: Any) -> bool:
        interval = connection.health_check_interval
        return bool(interval) and asyncio.get_running_loop().time() > connection.next_health_check

    def _read_until(self, loop: asyncio.AbstractEventLoop, deadline: float) -> None:
        self._reading_until = deadline
        timer = self._timer
        if timer is None or timer.when() > deadline or self._timer_loop is not loop:
            if timer is not None:
                timer.cancel()
            self._timer, self._timer_loop = loop.call_at(deadline, self._check_deadline), loop

    def _check_deadline(self) -> None:
        """The timer: closes the transport under a read past its deadline (the read then fails
        and says it timed out), or waits for the deadline of the read under way, if any."""
        self._timer = None
        deadline = self._reading_until
        if deadline is None or self._connection is None:
            return
        loop = asyncio.get_running_loop()
        if loop.time() >= deadline - _EARLY_S:
            self._timed_out = True
            transport = getattr(self._connection._writer, "transport", None)
            if transport is not None:
                transport.abort()
        else:
            self._timer = loop.call_at(deadline, self._check_deadline)
