"""Connecting through Redis Sentinel: clients of the primary that follow a failover by
themselves, for a ``redis+sentinel://`` URL (parsed by :mod:`antre.sentinel_urls`).

The clients are redis-py's own (:class:`redis.sentinel.Sentinel` ``master_for``): each new
connection asks the Sentinels for the primary, and a ``READONLY`` reply (the server was demoted
to a replica) drops the connection and is raised as a ConnectionError, so the next attempt finds
the new primary instead of writing to a replica forever. :mod:`antre.connection` picks this
module by the URL's scheme.
"""

from __future__ import annotations

from typing import Any, Final

import redis
import redis.asyncio
import redis.asyncio.connection
import redis.asyncio.retry
import redis.asyncio.sentinel
import redis.backoff
import redis.connection
import redis.retry
import redis.sentinel

from antre.sentinel_urls import SentinelUrl

#: A command that meets a dropped connection (the old primary died or was demoted) is sent again
#: this many times, each after asking the Sentinels anew. redis-py gives clients built on a
#: Sentinel pool no retries of their own; longer outages are ridden out by the callers' loops.
COMMAND_RETRIES: Final = 3
#: Each retry waits a random time up to 0.1, 0.2, then 0.4 s (redis-py 5.3's
#: ExponentialWithJitterBackoff draws the same below its cap; earlier releases lack it).
_BACKOFF: Final = redis.backoff.FullJitterBackoff(base=0.05, cap=0.5)
#: redis-py's TLS options, given to the Sentinel connections too with rediss+sentinel://.
_TLS_OPTIONS: Final = ("ssl_ca_certs", "ssl_ca_path", "ssl_ca_data", "ssl_certfile",
                       "ssl_keyfile", "ssl_cert_reqs", "ssl_check_hostname", "ssl_password",
                       "ssl_min_version", "ssl_ciphers")


class _PrimaryConnection(redis.sentinel.SentinelManagedConnection):
    """redis-py's connection to the primary, made to ask the Sentinels again on every reconnect.

    redis-py 6 and later reconnect a dropped connection inside a command's retry through
    ``connect_check_health``, which dials the address of the previous connect
    (redis/redis-py#3874): after a failover that is the old primary, dead or a replica by now,
    so every retry fails. Resolving the primary there first makes the retry land on the new one.
    """

    _resolving = False

    def connect_to(self, address: tuple[str, int]) -> None:
        self._resolving = True  # the address was just asked for: do not ask twice
        try:
            super().connect_to(address)  # type: ignore[no-untyped-call]
        finally:
            self._resolving = False

    def connect_check_health(self, *args: Any, **kwargs: Any) -> None:
        # No socket: not connected (the sync connections' is_connected is new in redis-py 8).
        if not self._resolving and self._sock is None and self.connection_pool.is_master:
            self.host, self.port = self.connection_pool.get_master_address()
        super().connect_check_health(*args, **kwargs)


class _PrimarySSLConnection(_PrimaryConnection, redis.connection.SSLConnection):
    pass


class _AsyncPrimaryConnection(redis.asyncio.sentinel.SentinelManagedConnection):
    """The asyncio twin of :class:`_PrimaryConnection`."""

    _resolving = False

    async def connect_to(self, address: tuple[str, int]) -> None:
        self._resolving = True
        try:
            await super().connect_to(address)  # type: ignore[no-untyped-call]
        finally:
            self._resolving = False

    async def connect_check_health(self, *args: Any, **kwargs: Any) -> None:
        if not self._resolving and not self.is_connected and self.connection_pool.is_master:
            self.host, self.port = await self.connection_pool.get_master_address()
        await super().connect_check_health(*args, **kwargs)


class _AsyncPrimarySSLConnection(_AsyncPrimaryConnection, redis.asyncio.connection.SSLConnection):
    pass


class SentinelRedis(redis.Redis):
    """A sync client of the primary a Sentinel group names; closing it also closes the
    connections to the Sentinels."""

    sentinels: redis.sentinel.Sentinel | None = None
    #: The service the Sentinels monitor the primary under.
    service: str = ""

    def primary_address(self) -> tuple[str, int]:
        """Where the Sentinels say the primary is now (raises when none of them knows)."""
        assert self.sentinels is not None
        host, port = self.sentinels.discover_master(self.service)  # type: ignore[no-untyped-call]
        return str(host), int(port)

    def close(self) -> None:
        super().close()
        if self.sentinels is not None:
            # What Sentinel.close() does from redis-py 8.1 on; earlier releases have none.
            for sentinel_client in self.sentinels.sentinels:
                sentinel_client.close()


class AsyncSentinelRedis(redis.asyncio.Redis):
    """The asyncio twin of :class:`SentinelRedis`."""

    sentinels: redis.asyncio.sentinel.Sentinel | None = None
    service: str = ""

    async def primary_address(self) -> tuple[str, int]:
        assert self.sentinels is not None
        host, port = await self.sentinels.discover_master(self.service)
        return str(host), int(port)

    async def aclose(self, close_connection_pool: bool | None = None) -> None:
        await super().aclose(close_connection_pool)
        if self.sentinels is not None:
            for sentinel_client in self.sentinels.sentinels:  # as in SentinelRedis.close()
                await sentinel_client.aclose()


def _sentinel_kwargs(parsed: SentinelUrl, server_options: dict[str, Any],
                     retry: Any) -> dict[str, Any]:
    # With TLS, the Sentinels are verified as the servers are (same CA, same rules). No
    # retries per Sentinel: the next Sentinel is the retry. redis-py's default (10 tries with a
    # growing pause) kept a client on a dead Sentinel, one that died with the primary's node,
    # for seconds before it asked the next one.
    tls = {k: v for k, v in server_options.items() if k in _TLS_OPTIONS} if parsed.tls else {}
    return {**tls, "retry": retry, **parsed.sentinel_options}


def connect(parsed: SentinelUrl, server_options: dict[str, Any]) -> SentinelRedis:
    """A sync client of the primary; ``server_options`` are the redis-py connection options of
    the Redis servers (the URL's, over the caller's defaults)."""
    options = {k: v for k, v in server_options.items() if k != "ssl"}
    sentinel = redis.sentinel.Sentinel(  # type: ignore[no-untyped-call]
        list(parsed.sentinels), min_other_sentinels=parsed.min_other_sentinels,
        sentinel_kwargs=_sentinel_kwargs(parsed, server_options,
                                         redis.retry.Retry(redis.backoff.NoBackoff(), 0)),
        **options)
    client = sentinel.master_for(  # type: ignore[no-untyped-call]
        parsed.service, redis_class=SentinelRedis,
        connection_class=_PrimarySSLConnection if parsed.tls else _PrimaryConnection,
        retry=redis.retry.Retry(_BACKOFF, COMMAND_RETRIES))
    client.sentinels, client.service = sentinel, parsed.service
    return client  # type: ignore[no-any-return]


def connect_async(parsed: SentinelUrl, server_options: dict[str, Any]) -> AsyncSentinelRedis:
    """The asyncio twin of :func:`connect`."""
    options = {k: v for k, v in server_options.items() if k != "ssl"}
    sentinel = redis.asyncio.sentinel.Sentinel(  # type: ignore[no-untyped-call]
        list(parsed.sentinels), min_other_sentinels=parsed.min_other_sentinels,
        sentinel_kwargs=_sentinel_kwargs(parsed, server_options,
                                         redis.asyncio.retry.Retry(redis.backoff.NoBackoff(), 0)),
        **options)
    client = sentinel.master_for(
        parsed.service, redis_class=AsyncSentinelRedis,
        connection_class=_AsyncPrimarySSLConnection if parsed.tls else _AsyncPrimaryConnection,
        retry=redis.asyncio.retry.Retry(_BACKOFF, COMMAND_RETRIES))
    client.sentinels, client.service = sentinel, parsed.service
    return client  # type: ignore[no-any-return]


def describe_unreachable(parsed: SentinelUrl, reason: str) -> str | None:
    """A hint for a failure to find or reach the primary through the Sentinels, or None."""
    addresses = ", ".join(f"{host}:{port}" for host, port in parsed.sentinels)
    lowered = reason.lower()
    if "no master found" in lowered:
        hint = (f"no Sentinel of {addresses} named a reachable primary for service "
                f"{parsed.service!r}: check the service name (SENTINEL MASTERS on a Sentinel "
                "lists them) and that a failover is not under way")
        if "noauth" in lowered or "auth" in lowered:
            hint += ("; the Sentinels ask for a password: give it with ?sentinel_password=")
        return hint
    return None
