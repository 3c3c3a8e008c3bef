"""Connecting to Redis: a standalone server, a Sentinel group or a Redis Cluster, chosen by
the URL.

``redis://`` and ``rediss://`` (TLS) and ``unix://`` give a standalone client;
``redis+sentinel://`` and ``rediss+sentinel://`` a client of the primary a Sentinel group names,
which follows a failover (:mod:`antre.sentinel`); ``redis+cluster://`` and
``rediss+cluster://`` give redis-py's cluster client (any node as seed).
"""

from __future__ import annotations

from typing import Any, Final
from urllib.parse import parse_qsl

import redis
import redis.asyncio
import redis.asyncio.cluster
import redis.cluster

from antre import command_packing, errors, redis_py_options, redis_urls, sentinel, sentinel_urls

_STANDALONE = {"redis", "rediss", "unix"}
_CLUSTER = {"redis+cluster": "redis", "rediss+cluster": "rediss"}

#: Long enough for the worker's blocking wait (at most a few seconds) plus slack.
SOCKET_TIMEOUT_S = 15.0
CONNECT_TIMEOUT_S = 5.0


_SECRET_QUERY_KEYS = ("password", "username", "user", "pass", "sentinel_password",
                      "sentinel_username", "ssl_password")


def redact(url: str) -> str:
    """The URL with every secret replaced, for messages and logs: the user info's password
    (even one with an unescaped '/' or '@') and password or username query parameters
    (redis-py honours ``?password=``)."""
    scheme, sep, rest = url.partition("://")
    if "@" in rest:
        userinfo, host_and_path = rest.rsplit("@", 1)
        user = userinfo.split(":", 1)[0] if ":" in userinfo else ""
        rest = f"{user}:***@{host_and_path}"
    location, question, query = rest.partition("?")
    if question:
        query = "&".join(
            f"{name}=***" if name.lower() in _SECRET_QUERY_KEYS else f"{name}={value}"
            for name, value in parse_qsl(query, keep_blank_values=True))
    return scheme + sep + location + question + query


def _split(url: str) -> tuple[bool, str]:
    if not isinstance(url, str) or "://" not in url:
        raise errors.InvalidArgument(
            f"redis url: got {redact(url)!r}; must look like redis://host:6379/0 (or rediss://,"
            " unix://, redis+sentinel://, redis+cluster://)"
        )
    scheme = url.split("://", 1)[0].lower()
    if scheme in _STANDALONE or sentinel_urls.is_sentinel_url(url):
        return False, url
    if scheme in _CLUSTER:
        return True, _CLUSTER[scheme] + url[len(scheme):]
    raise errors.InvalidArgument(
        f"redis url: got scheme {scheme!r} in {redact(url)!r}; must be one of "
        "redis, rediss, unix, redis+sentinel, rediss+sentinel, redis+cluster, rediss+cluster"
    )


#: For TLS URLs: verify the certificate chain and that it names the host connected to. redis-py
#: 6 made these its defaults; 5.x did not check the host name. Given here so no redis-py version
#: connects to an impostor; a URL can still say otherwise (?ssl_check_hostname=false,
#: ?ssl_cert_reqs=none) for a deliberate exception.
TLS_VERIFICATION: Final = {"ssl_cert_reqs": "required", "ssl_check_hostname": True}


def _driver_info() -> dict[str, Any]:
    """redis-py 7.1 and later look their own version up in the installed packages' metadata
    for every connection they open (1-5 ms each here, three of them before a worker's first
    claim); their ``__version__`` is the same string, so it is given once. Earlier versions read
    it once, at import, and take no such option."""
    try:
        from redis.driver_info import DriverInfo
    except ImportError:
        return {}
    return {"driver_info": DriverInfo(lib_version=redis.__version__)}


_DRIVER_INFO: Final = _driver_info()


def _options(url: str, **overrides: Any) -> dict[str, Any]:
    options: dict[str, Any] = {
        "decode_responses": True,
        "socket_timeout": SOCKET_TIMEOUT_S,
        "socket_connect_timeout": CONNECT_TIMEOUT_S,
        "health_check_interval": 30,
        **_DRIVER_INFO,
    }
    if url.split("://", 1)[0].lower() == "rediss":
        options.update(TLS_VERIFICATION)
    options.update(overrides)
    return options


def _cluster_options(url: str, client: type, overrides: dict[str, Any]) -> dict[str, Any]:
    """:func:`_options` for a cluster client: without the health checks it has no use for, and
    without ``driver_info`` where it takes none (redis-py 7.2.0-7.2.2's asyncio cluster client
    failed every call on it with a TypeError)."""
    options = _options(url, **overrides)
    options.pop("health_check_interval", None)
    if "driver_info" in options and not redis_py_options.constructor_takes(client, "driver_info"):
        del options["driver_info"]
    return options


def is_cluster_url(url: str) -> bool:
    return _split(url)[0]


def is_cluster_client(client: Any) -> bool:
    """Whether ``client`` is redis-py's cluster client, sync or asyncio."""
    return isinstance(client, redis.cluster.RedisCluster | redis.asyncio.cluster.RedisCluster)


def _parse_sentinel(url: str) -> sentinel_urls.SentinelUrl:
    try:
        return sentinel_urls.parse_url(url)
    except errors.InvalidArgument as exc:
        raise errors.InvalidArgument(f"redis url {redact(url)!r}: {exc}") from None


def _sentinel_options(parsed: sentinel_urls.SentinelUrl, overrides: dict[str, Any]) -> dict[str, Any]:
    """The servers' options: the URL's over the defaults (timeouts, TLS verification), as
    redis-py's from_url does for the other schemes."""
    defaults = _options("rediss://" if parsed.tls else "redis://", **overrides)
    return {**defaults, **parsed.server_options}


def _check_options_taken(url: str, *, sync: bool,
                         parsed: sentinel_urls.SentinelUrl | None = None) -> None:
    """Refuse an option of ``url`` the installed redis-py's client would fail on at its first
    command (:mod:`antre.redis_py_options`); ``url`` passed :func:`redis_urls.check_url`, or
    is the Sentinel URL ``parsed`` came from."""
    if parsed is not None:
        # Its options as redis-py read them (the sync parser, for both clients).
        redis_py_options.check([name for name in parsed.server_options if name != "ssl"],
                               client=redis_py_options.SYNC if sync else redis_py_options.ASYNCIO,
                               tls=parsed.tls, sync_parser=True)
        return
    cluster, real_url = _split(url)
    if cluster:
        client = redis_py_options.SYNC_CLUSTER if sync else redis_py_options.ASYNCIO_CLUSTER
    else:
        client = redis_py_options.SYNC if sync else redis_py_options.ASYNCIO
    query = url.partition("?")[2].partition("#")[0]  # as redis_urls.check_url_options reads it
    redis_py_options.check([name for name, _ in parse_qsl(query, keep_blank_values=True)],
                           client=client, tls=real_url.lower().startswith("rediss://"))


def connect(url: str, **overrides: Any) -> Any:
    """A sync client for ``url`` (``redis.Redis`` or ``redis.cluster.RedisCluster``)."""
    cluster, real_url = _split(url)
    if sentinel_urls.is_sentinel_url(url):
        parsed = _parse_sentinel(url)
        _check_options_taken(url, sync=True, parsed=parsed)
        return sentinel.connect(parsed, _sentinel_options(parsed, overrides))
    redis_urls.check_url(url)
    _check_options_taken(url, sync=True)
    if cluster:
        options = _cluster_options(real_url, redis.cluster.RedisCluster, overrides)
        if options.get("ssl_check_hostname") and "ssl_check_hostname" not in (
                redis_py_options.taken(redis_py_options.SYNC_CLUSTER, tls=True)
                or {"ssl_check_hostname"}):
            # Dropped without a word: the client would accept any server's certificate.
            raise errors.InvalidArgument(
                f"redis url {redact(url)!r}: a TLS cluster needs redis-py 6.1 or later "
                f"(installed: {redis.__version__}) for antre.Queue and the command line: "
                "earlier releases do not check that a server's certificate names it; "
                "upgrade redis")
    try:
        if cluster:
            return redis.cluster.RedisCluster.from_url(real_url, **options)
        return redis.Redis.from_url(real_url, **_options(real_url, **overrides))
    except (ValueError, redis.RedisError) as exc:
        raise errors.InvalidArgument(f"redis url {redact(url)!r}: {exc}") from None


def connect_async(url: str, *,
                  cluster_class: type[redis.asyncio.cluster.RedisCluster] = (
                      redis.asyncio.cluster.RedisCluster),
                  **overrides: Any) -> Any:
    """An asyncio client for ``url`` (``redis.asyncio.Redis`` or its cluster twin, of
    ``cluster_class``: its constructor takes no options of redis-py's connections, so a caller
    that needs one on every node's, the operator its parser, gives a subclass)."""
    cluster, real_url = _split(url)
    if sentinel_urls.is_sentinel_url(url):
        parsed = _parse_sentinel(url)
        _check_options_taken(url, sync=False, parsed=parsed)
        return command_packing.packed_by_hiredis(
            sentinel.connect_async(parsed, _sentinel_options(parsed, overrides)))
    redis_urls.check_url(url)
    _check_options_taken(url, sync=False)
    try:
        if cluster:
            return cluster_class.from_url(
                real_url, **_cluster_options(real_url, redis.asyncio.cluster.RedisCluster,
                                             overrides))
        return command_packing.packed_by_hiredis(
            redis.asyncio.Redis.from_url(real_url, **_options(real_url, **overrides)))
    except (ValueError, redis.RedisError) as exc:
        raise errors.InvalidArgument(f"redis url {redact(url)!r}: {exc}") from None


def describe_failure(url: str, exc: BaseException) -> str:
    """One line for a Redis call that failed: what Redis answered when it did (a refusal, a
    durable write too few replicas confirmed: "unreachable" would be wrong, and for the latter
    misleading, as the write is done on the primary), else :func:`describe_unreachable`."""
    if isinstance(exc, errors.RedisRefused | errors.NotReplicated):
        return str(exc)
    return describe_unreachable(url, exc)


def describe_unreachable(url: str, exc: BaseException) -> str:
    """One line for a failed connection, with a hint when the cause is likely a TLS mismatch
    (a TLS client stalls on a plain-text port; a plain client is cut off by a TLS port)."""
    reason = str(exc).removeprefix("Redis is unreachable: ")
    message = f"Redis at {redact(url)} is unreachable: {reason}"
    scheme = url.split("://", 1)[0].lower()
    if sentinel_urls.is_sentinel_url(url):
        try:
            hint = sentinel.describe_unreachable(sentinel_urls.parse_url(url), reason)
        except errors.InvalidArgument:
            hint = None
        if hint:
            return f"{message}; {hint}"
        scheme = scheme.replace("+sentinel", "")
    lowered = reason.lower()
    if scheme.startswith("rediss") and ("timeout" in lowered or "timed out" in lowered):
        message += ("; rediss:// speaks TLS and gets no TLS answer: if the server is plain text, "
                    "use redis://")
    elif scheme.startswith("rediss") and "certificate" in lowered:
        message += ("; the server's certificate is not trusted for this host name: give the CA "
                    "with ?ssl_ca_certs=/path/ca.pem, and connect with a name the certificate lists")
    elif scheme in ("redis", "redis+cluster") and ("closed" in lowered or "reset" in lowered):
        message += "; if the server expects TLS, use rediss://"
    return message


def describe_cluster_error(url: str, exc: BaseException) -> str:
    """One line for redis-py's cluster errors (a cluster URL pointed at a single server...)."""
    reason = str(exc)
    if "cluster mode is not enabled" in reason.lower():
        return (f"Redis at {redact(url)} is not a Redis Cluster (cluster mode is not enabled on "
                "that node): use redis:// or rediss:// for a single server")
    return f"Redis Cluster at {redact(url)}: {reason}"
