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
"""

from __future__ import annotations

import os
import threading
import weakref
from typing import Any, TypeVar

import hiredis
import redis

from antre import errors
from antre.protocol import scripts

T = TypeVar("T")


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
            packed = [hiredis.pack_command(scripts.evalsha_command(op))]  # type: ignore[arg-type]

            def send() -> Any:
                connection.send_packed_command(packed)
                return connection.read_response()

            # Resent after a dropped connection as redis-py's own path resends any command; an
            # enqueue is safe to resend (its job id is chosen by the client, and the script
            # returns the job an id already names).
            return connection.retry.call_with_retry(send, lambda _: connection.disconnect())
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
        # The check the pool makes of every connection it hands out: a reply waiting on an idle
        # connection means the server closed it (a restart, a timeout, CLIENT KILL), so dial
        # again before sending rather than fail a call Redis never saw.
        try:
            stale = self._connection.can_read()
        except (redis.ConnectionError, redis.TimeoutError, OSError):
            stale = True
        if stale:
            self._connection.disconnect()
        return self._connection

    def close(self) -> None:
        """Gives the connection back to the client's pool (the client closes it); the next
        call takes one again."""
        with self._lock:
            # A client this path does not serve (a Redis Cluster client has no pool) holds none.
            _give_back(self.client.connection_pool if self._enabled else None, self._held)
            self._connection = None


def _give_back(pool: Any, held: list[tuple[Any, int]]) -> None:
    if pool is not None and held and held[0][1] == os.getpid():
        pool.release(held[0][0])
    held.clear()


_NOSCRIPT: Any = object()
