"""Script calls of a sync client on one connection kept for the client, without redis-py's
per-command layers.

A producer that enqueues one job per call spends as much time in redis-py's per-command work
(taking a connection from the pool and giving it back, the command's metrics hooks, response
callbacks) as in its own code: about half of the client's CPU per enqueue. :class:`PinnedConnection`
takes one connection from the client's pool once and sends every script call straight on it
(EVALSHA packed by hiredis, the reply read by the connection's parser), with the client's own retry
policy on a dropped connection, as redis-py's ``single_connection_client`` does.

Every call still returns only after Redis replied, so nothing is acknowledged that Redis does
not have. Whatever this path does not cover goes through :func:`scripts.run` unchanged: durable
writes (a ``WAIT`` pipeline), clients other than a plain ``redis.Redis`` on a plain connection
pool (Sentinel, Cluster, client-side caching, credential providers), a call made while another
thread holds the pinned connection, and the first call after ``SCRIPT FLUSH`` (NOSCRIPT: the
general path loads the script with EVAL).

On a plain TCP or Unix socket connection with redis-py's hiredis parser, the call is written to
the socket and its reply read into the parser's own hiredis reader here, without the
connection's ``send_packed_command`` and ``read_response`` layers (its error texts, the
readiness poll redis-py builds per check): about a fifth of a sync enqueue's CPU on this path.
What those layers do that matters is kept: the socket timeout bounds every write and read, a
failure closes the connection (the retry policy dials again), push messages go to the parser's
handlers, a reply error is raised, and a health check that is due goes through redis-py, which
PINGs first. TLS connections and any other connection class take the connection's own methods.
"""

from __future__ import annotations

import os
import select
import threading
import time
import weakref
from typing import Any, TypeVar

import hiredis
import redis
import redis._parsers.hiredis
import redis.connection

from antre import errors
from antre.protocol import scripts

T = TypeVar("T")

_HIREDIS_PARSER: Any = getattr(redis._parsers.hiredis, "_HiredisParser", None)
#: What redis-py's hiredis parser makes its reader return for an incomplete reply (None before
#: redis-py 5.1, whose reader returned False: such connections take redis-py's own methods).
_NOT_ENOUGH_DATA: Any = getattr(redis._parsers.hiredis, "NOT_ENOUGH_DATA", None)
_PUSH: Any = getattr(hiredis, "PushNotification", None)  # hiredis 3.2 and later
#: Connection classes whose socket is a plain one: TLS keeps decrypted bytes above the socket,
#: which a readiness poll does not see.
_PLAIN_SOCKET_CONNECTIONS = (redis.Connection, redis.UnixDomainSocketConnection)


def _drives_directly(connection: Any) -> bool:
    """Whether ``connection`` sends and reads as redis-py's own classes do, through a hiredis
    parser, on a plain socket: then :meth:`PinnedConnection._exchange` may do the same."""
    kind = type(connection)
    base: Any = redis.connection.AbstractConnection
    return (kind in _PLAIN_SOCKET_CONNECTIONS
            and kind.send_packed_command is base.send_packed_command
            and kind.read_response is base.read_response
            and type(getattr(connection, "_parser", None)) is _HIREDIS_PARSER
            and _NOT_ENOUGH_DATA is not None
            # The stale check polls the socket: no select.poll on Windows (redis-py falls back
            # to selectors there).
            and hasattr(select, "poll"))


def _through_connection(connection: Any, packed: bytes) -> Any:
    connection.send_packed_command([packed])
    return connection.read_response()


def _pinnable(client: Any) -> bool:
    pool = getattr(client, "connection_pool", None)
    if type(client) is not redis.Redis or type(pool) is not redis.ConnectionPool:
        return False
    options = pool.connection_kwargs
    # A credential provider re-authenticates connections as they go back to the pool, and a
    # client-side cache wraps them: both need redis-py's own path.
    return getattr(pool, "cache", None) is None and options.get("credential_provider") is None


class PinnedConnection:
    """Runs :class:`scripts.Op` calls for one sync client; thread-safe (a call that finds the
    pinned connection busy takes the pool's path instead of waiting)."""

    def __init__(self, client: Any) -> None:
        self.client = client
        self._enabled = _pinnable(client)
        self._lock = threading.Lock()
        self._connection: Any = None
        #: The connection is driven by :meth:`_exchange` (see the module's docstring).
        self._direct = False
        #: A readiness poll of the connection's socket, made once per socket.
        self._polled: tuple[Any, Any] | None = None
        #: The process the connection was taken in: a forked child must not share the socket.
        self._pid = os.getpid()
        #: (connection, pid) while one is held, for the finalizer: a queue dropped without
        #: close() (one made per request on a shared client) gives its connection back to the
        #: pool instead of leaking it.
        self._held: list[tuple[Any, int]] = []
        weakref.finalize(self, _give_back, client.connection_pool if self._enabled else None,
                         self._held)

    def run(self, op: scripts.Op[T]) -> T:
        if op.durable is not None or not self._enabled or not self._lock.acquire(blocking=False):
            return scripts.run(self.client, op)
        try:
            reply = self._call(op)
        finally:
            self._lock.release()
        if reply is _NOSCRIPT:
            return scripts.run(self.client, op)
        return op.parse(reply)

    def _call(self, op: scripts.Op[Any]) -> Any:
        try:
            connection = self._take()
            # What redis-py's own packer calls in the end (redis[hiredis] is a dependency); the
            # stub types the argument as a 1-tuple.
            packed = hiredis.pack_command(scripts.evalsha_command(op))  # type: ignore[arg-type]
            exchange = self._exchange if self._direct else _through_connection
            # Resent after a dropped connection as redis-py's own path resends any command; an
            # enqueue is safe to resend (its job id is chosen by the client, and the script
            # returns the job an id already names).
            return connection.retry.call_with_retry(lambda: exchange(connection, packed),
                                                    lambda _: connection.disconnect())
        except redis.ResponseError as exc:
            if scripts.is_noscript(exc):
                return _NOSCRIPT
            raise scripts.translate_error(exc) from None
        except (redis.ConnectionError, redis.TimeoutError) as exc:
            raise errors.RedisUnavailable(f"Redis is unreachable: {exc}") from exc

    def _take(self) -> Any:
        if self._pid != os.getpid():  # forked: the parent's socket is not ours to use
            self._connection, self._pid = None, os.getpid()
            self._held.clear()
        if self._connection is None:
            pool = self.client.connection_pool
            try:
                self._connection = pool.get_connection()
            except TypeError:  # redis-py before 5.3 wants a command name
                self._connection = pool.get_connection("EVALSHA")
            self._held[:] = [(self._connection, self._pid)]
            self._direct = _drives_directly(self._connection)
        # A MOVING maintenance notification (Redis Enterprise, Redis Cloud) marks a connection
        # to be dialled again, which redis-py's client does before its next command.
        should_reconnect = getattr(self._connection, "should_reconnect", None)
        if should_reconnect is not None and should_reconnect():
            self._connection.disconnect()
        # The check the pool makes of every connection it hands out: a reply waiting on an idle
        # connection means the server closed it (a restart, a timeout, CLIENT KILL), so dial
        # again before sending rather than fail a call Redis never saw.
        try:
            stale = self._readable(self._connection)
        except (redis.ConnectionError, redis.TimeoutError, OSError):
            stale = True
        if stale:
            self._connection.disconnect()
        return self._connection

    def _readable(self, connection: Any) -> bool:
        sock = connection._sock if self._direct else None
        if sock is None:  # not connected yet (redis-py connects), or not ours to poll
            return bool(connection.can_read())
        reader = connection._parser._reader
        if reader is None:  # disconnect() under way in another thread: its reader is gone
            return True
        if reader.has_data():
            return True
        if self._polled is None or self._polled[0] is not sock:
            poller = select.poll()
            poller.register(sock, select.POLLIN)
            self._polled = (sock, poller)
        return bool(self._polled[1].poll(0))

    @staticmethod
    def _exchange(connection: Any, packed: bytes) -> Any:
        """Writes ``packed`` and reads its reply as the connection's own methods would."""
        sock, parser = connection._sock, connection._parser
        interval = connection.health_check_interval
        if sock is None or (interval and time.monotonic() > connection.next_health_check):
            return _through_connection(connection, packed)  # redis-py connects, or PINGs first
        reader, buffer = parser._reader, parser._buffer
        if reader is None:
            # Being disconnected by another thread (a shared client closed: disconnect() drops
            # the reader before the socket). Nothing was sent on it: dial again and send.
            connection.disconnect()
            return _through_connection(connection, packed)
        try:
            sock.sendall(packed)
            while True:
                reply = reader.gets()
                while reply is _NOT_ENOUGH_DATA:
                    read = sock.recv_into(buffer)
                    if not read:
                        raise redis.ConnectionError("Connection closed by server.")
                    reader.feed(buffer, 0, read)
                    reply = reader.gets()
                if _PUSH is None or not isinstance(reply, _PUSH):
                    break
                parser.handle_push_response(reply)  # as the parser itself does, then read on
        except TimeoutError:  # the socket timeout
            connection.disconnect()
            raise redis.TimeoutError("Timeout talking to Redis") from None
        except OSError as exc:
            connection.disconnect()
            raise redis.ConnectionError(f"Error while talking to Redis: {exc}") from exc
        except BaseException:
            connection.disconnect()
            raise
        if interval:
            connection.next_health_check = time.monotonic() + interval
        if isinstance(reply, (redis.ResponseError, redis.ConnectionError)):
            try:
                raise reply
            finally:
                # The raised error's traceback holds this frame, whose local would hold the
                # error: a cycle that kept the caller's Queue, and its pool connection, until
                # the next garbage collection.
                reply = None
        return reply

    def close(self) -> None:
        """Gives the connection back to the client's pool (the client closes it); the next
        call takes one again."""
        with self._lock:
            # A client this path does not serve (a Redis Cluster client has no pool) holds none.
            _give_back(self.client.connection_pool if self._enabled else None, self._held)
            self._connection = None
            self._polled = None


def _give_back(pool: Any, held: list[tuple[Any, int]]) -> None:
    if pool is not None and held and held[0][1] == os.getpid():
        pool.release(held[0][0])
    held.clear()


_NOSCRIPT: Any = object()
