"""Connecting through Redis Sentinel: the ``redis+sentinel://`` URL and clients of the primary
that follow a failover by themselves.

The URL names the Sentinels and the service (Sentinel's "master name")::

    redis+sentinel://[user:password@]host1[:26379][,host2[:26379]...]/service[/db][?options]
    rediss+sentinel://...   (TLS to the Sentinels and to the Redis servers)

The user and password are the Redis servers' (``requirepass`` / ACL). Sentinels that require
a password of their own take ``?sentinel_password=`` (and ``?sentinel_username=``);
``?min_other_sentinels=N`` ignores a Sentinel that sees fewer than N peers (one cut off from the
others may name a stale primary). Every other option is redis-py's, as for ``redis://``.

The clients are redis-py's own (:class:`redis.sentinel.Sentinel` ``master_for``): each new
connection asks the Sentinels for the primary, and a ``READONLY`` reply (the server was demoted
to a replica) drops the connection and is raised as a ConnectionError, so the next attempt finds
the new primary instead of writing to a replica forever. :mod:`antre.connection` picks this
module by the URL's scheme.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Final
from urllib.parse import parse_qsl, unquote, urlencode

import redis
import redis.asyncio
import redis.asyncio.connection
import redis.asyncio.retry
import redis.asyncio.sentinel
import redis.backoff
import redis.connection
import redis.retry
import redis.sentinel

from antre import errors

SCHEMES: Final = {"redis+sentinel": "redis", "rediss+sentinel": "rediss"}
DEFAULT_PORT: Final = 26379
#: A Sentinel that does not answer within this is skipped for the next one. Sentinels answer
#: from memory at once; a long wait here only delays finding the primary during a failover.
SENTINEL_TIMEOUT_S: Final = 2.0
#: Query parameters that configure the Sentinels rather than the Redis servers.
SENTINEL_QUERY_KEYS: Final = ("sentinel_username", "sentinel_password", "min_other_sentinels")
#: A command that meets a dropped connection (the old primary died or was demoted) is sent again
#: this many times, each after asking the Sentinels anew. redis-py gives clients built on a
#: Sentinel pool no retries of their own; longer outages are ridden out by the callers' loops.
COMMAND_RETRIES: Final = 3
_BACKOFF: Final = redis.backoff.ExponentialWithJitterBackoff(base=0.05, cap=0.5)
#: redis-py's TLS options, given to the Sentinel connections too with rediss+sentinel://.
_TLS_OPTIONS: Final = ("ssl_ca_certs", "ssl_ca_path", "ssl_ca_data", "ssl_certfile",
                       "ssl_keyfile", "ssl_cert_reqs", "ssl_check_hostname", "ssl_password",
                       "ssl_min_version", "ssl_ciphers")


@dataclass(frozen=True)
class SentinelUrl:
    """A parsed ``redis+sentinel://`` URL."""

    sentinels: tuple[tuple[str, int], ...]
    """(host, port) of each Sentinel, in the URL's order."""
    service: str
    """The name the Sentinels monitor the primary under (``sentinel monitor <name> ...``)."""
    tls: bool
    server_options: dict[str, Any] = field(default_factory=dict)
    """redis-py connection options for the Redis servers: db, username, password, TLS..."""
    sentinel_options: dict[str, Any] = field(default_factory=dict)
    """Options for the connections to the Sentinels (timeouts, TLS, their own credentials)."""
    min_other_sentinels: int = 0


def is_sentinel_url(url: str) -> bool:
    return url.split("://", 1)[0].lower() in SCHEMES


def _host_port(text: str) -> tuple[str, int]:
    """``host``, ``host:port``, ``[v6]`` or ``[v6]:port``; refuses anything else."""
    if text.startswith("["):
        host, bracket, rest = text[1:].partition("]")
        if not bracket or (rest and not rest.startswith(":")):
            raise errors.InvalidArgument(f"sentinel address {text!r}: an IPv6 address must be "
                                         "written [address]:port")
        port_text = rest[1:]
    else:
        host, _, port_text = text.partition(":")
    if not host:
        raise errors.InvalidArgument(f"sentinel address {text!r}: the host is missing; give "
                                     "host:port pairs separated by commas")
    if not port_text:
        return host, DEFAULT_PORT
    if not port_text.isdigit() or not 0 < int(port_text) < 65536:
        raise errors.InvalidArgument(f"sentinel address {text!r}: the port must be a number from "
                                     "1 to 65535")
    return host, int(port_text)


def parse_url(url: str) -> SentinelUrl:
    """Parses a ``redis+sentinel://`` URL. Messages never contain the URL or its password, so
    callers may show them as they are."""
    scheme, sep, rest = url.partition("://")
    base = SCHEMES.get(scheme.lower())
    if not sep or base is None:
        raise errors.InvalidArgument(f"scheme must be one of {sorted(SCHEMES)}")
    rest, _, query = rest.partition("?")
    rest = rest.split("#", 1)[0]
    userinfo, at, location = rest.rpartition("@")
    if not at:
        userinfo, location = "", rest
    hosts, _, path = location.partition("/")
    sentinels = tuple(_host_port(part.strip()) for part in hosts.split(",") if part.strip())
    if not sentinels:
        raise errors.InvalidArgument("no Sentinel address: give host:port pairs separated by "
                                     "commas, e.g. redis+sentinel://s1:26379,s2:26379/mymaster")
    segments = [unquote(segment) for segment in path.split("/")] if path else []
    if not segments or not segments[0]:
        raise errors.InvalidArgument("the service name is missing: put it in the path, e.g. "
                                     "redis+sentinel://s1:26379,s2:26379/mymaster/0")
    if len(segments) > 2 or (len(segments) == 2 and segments[1] and not segments[1].isdigit()):
        raise errors.InvalidArgument("the path must be /service or /service/db (db a number)")
    service, db = segments[0], (segments[1] if len(segments) == 2 and segments[1] else "0")

    pairs = parse_qsl(query, keep_blank_values=True)
    sentinel_query = {name: value for name, value in pairs if name in SENTINEL_QUERY_KEYS}
    server_query = [(name, value) for name, value in pairs if name not in SENTINEL_QUERY_KEYS]
    # redis-py parses the servers' options as for a redis:// URL with the same user info.
    server_url = f"{base}://{userinfo + '@' if at else ''}sentinel/{db}"
    if server_query:
        server_url += "?" + urlencode(server_query)
    try:
        options = redis.connection.parse_url(server_url)  # type: ignore[no-untyped-call]
    except ValueError as exc:
        raise errors.InvalidArgument(str(exc).replace(server_url, "the URL")) from None
    for name in ("host", "port", "connection_class", "path"):
        options.pop(name, None)
    tls = base == "rediss"
    sentinel_options: dict[str, Any] = {
        "socket_timeout": SENTINEL_TIMEOUT_S, "socket_connect_timeout": SENTINEL_TIMEOUT_S}
    if tls:
        options["ssl"] = True
        sentinel_options["ssl"] = True
    for name in ("username", "password"):
        if sentinel_query.get(f"sentinel_{name}"):
            sentinel_options[name] = sentinel_query[f"sentinel_{name}"]
    minimum = sentinel_query.get("min_other_sentinels", "0")
    if not minimum.isdigit():
        raise errors.InvalidArgument(f"min_other_sentinels: got {minimum!r}; must be an integer "
                                     ">= 0")
    return SentinelUrl(sentinels=sentinels, service=service, tls=tls, server_options=options,
                       sentinel_options=sentinel_options, min_other_sentinels=int(minimum))


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
        if not self._resolving and not self.is_connected and self.connection_pool.is_master:
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
            self.sentinels.close()


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
            await self.sentinels.aclose()


def _sentinel_kwargs(parsed: SentinelUrl, server_options: dict[str, Any]) -> dict[str, Any]:
    # With TLS, the Sentinels are verified as the servers are (same CA, same rules).
    tls = {k: v for k, v in server_options.items() if k in _TLS_OPTIONS} if parsed.tls else {}
    return {**tls, **parsed.sentinel_options}


def connect(parsed: SentinelUrl, server_options: dict[str, Any]) -> SentinelRedis:
    """A sync client of the primary; ``server_options`` are the redis-py connection options of
    the Redis servers (the URL's, over the caller's defaults)."""
    options = {k: v for k, v in server_options.items() if k != "ssl"}
    sentinel = redis.sentinel.Sentinel(  # type: ignore[no-untyped-call]
        list(parsed.sentinels), min_other_sentinels=parsed.min_other_sentinels,
        sentinel_kwargs=_sentinel_kwargs(parsed, server_options), **options)
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
        sentinel_kwargs=_sentinel_kwargs(parsed, server_options), **options)
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
