"""``redis+sentinel://`` URLs, parsed without connecting (pure: the operator validates JobQueue
specs with it); :mod:`antre.sentinel` builds the clients.

The URL names the Sentinels and the service (Sentinel's "master name")::

    redis+sentinel://[user:password@]host1[:26379][,host2[:26379]...]/service[/db][?options]
    rediss+sentinel://...   (TLS to the Sentinels and to the Redis servers)

The user and password are the Redis servers' (``requirepass`` / ACL). Sentinels that require
a password of their own take ``?sentinel_password=`` (and ``?sentinel_username=``);
``?min_other_sentinels=N`` ignores a Sentinel that sees fewer than N peers (one cut off from the
others may name a stale primary). Every other option is redis-py's, as for ``redis://``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Final
from urllib.parse import parse_qsl, quote, unquote, urlencode

import redis.connection

from antre import errors, redis_urls

SCHEMES: Final = {"redis+sentinel": "redis", "rediss+sentinel": "rediss"}
DEFAULT_PORT: Final = 26379
#: A Sentinel that does not answer within this is skipped for the next one. Sentinels answer
#: from memory at once; a long wait here only delays finding the primary during a failover.
SENTINEL_TIMEOUT_S: Final = 2.0
#: Query parameters that configure the Sentinels rather than the Redis servers.
SENTINEL_QUERY_KEYS: Final = ("sentinel_username", "sentinel_password", "min_other_sentinels")


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
            raise errors.InvalidArgument("a Sentinel address: an IPv6 address must be written "
                                         "[address]:port")
        port_text = rest[1:]
    else:
        host, _, port_text = text.partition(":")
    if not host:
        raise errors.InvalidArgument("a Sentinel address: the host is missing; give host:port "
                                     "pairs separated by commas")
    if not port_text:
        return host, DEFAULT_PORT
    # ASCII digits only: '²' is a digit to str.isdigit but not to int(), and int() would read
    # other scripts' digits ('٢٦٣٧٩') as a port no other parser of the URL takes.
    if not (port_text.isascii() and port_text.isdigit()) or not 0 < int(port_text) < 65536:
        raise errors.InvalidArgument("a Sentinel address: the port must be a number from 1 to "
                                     "65535")
    return host, int(port_text)


def _encoded_userinfo(userinfo: str) -> str:
    username, colon, password = userinfo.partition(":")
    return quote(unquote(username), safe="") + colon + quote(unquote(password), safe="")


def parse_url(url: str) -> SentinelUrl:
    """Parses a ``redis+sentinel://`` URL. Messages never contain the user info nor the hosts
    (a malformed URL may hold a password where a host was expected), so callers may show them
    as they are; a bad option value is quoted (the query follows the last '@': never a piece
    of the password)."""
    scheme, sep, rest = url.partition("://")
    base = SCHEMES.get(scheme.lower())
    if not sep or base is None:
        raise errors.InvalidArgument(f"scheme must be one of {sorted(SCHEMES)}")
    # The user info ends at the last '@' (as in connection.redact), so a password holding an
    # unescaped '/', '?' or '#' is never read as a host, a path or a query.
    userinfo, at, location = rest.rpartition("@")
    if not at:
        userinfo, location = "", rest
    location, _, query = location.partition("?")
    location = location.split("#", 1)[0]
    hosts, _, path = location.partition("/")
    sentinels = tuple(_host_port(part.strip()) for part in hosts.split(",") if part.strip())
    if not sentinels:
        raise errors.InvalidArgument("no Sentinel address: give host:port pairs separated by "
                                     "commas, e.g. redis+sentinel://s1:26379,s2:26379/mymaster")
    segments = [unquote(segment) for segment in path.split("/")] if path else []
    if not segments or not segments[0]:
        raise errors.InvalidArgument("the service name is missing: put it in the path, e.g. "
                                     "redis+sentinel://s1:26379,s2:26379/mymaster/0")
    if len(segments) > 2 or (len(segments) == 2 and segments[1] and not (
            segments[1].isascii() and segments[1].isdigit())):
        raise errors.InvalidArgument("the path must be /service or /service/db (db a number)")
    service, db = segments[0], (segments[1] if len(segments) == 2 and segments[1] else "0")

    pairs = parse_qsl(query, keep_blank_values=True)
    sentinel_query = {name: value for name, value in pairs if name in SENTINEL_QUERY_KEYS}
    server_query = [(name, value) for name, value in pairs if name not in SENTINEL_QUERY_KEYS]
    # redis-py would hand an unknown name to its connection class: a TypeError at connect.
    redis_urls.check_options(server_query,
                             allowed=redis_urls.URL_OPTIONS | frozenset(SENTINEL_QUERY_KEYS))
    redis_urls.check_transport_options((name for name, _ in server_query), scheme=scheme)
    # redis-py parses the servers' options as for a redis:// URL with the same user info,
    # percent-encoded again so that a '/', '?', '#' or '@' in the password stays in it.
    server_url = f"{base}://{_encoded_userinfo(userinfo) + '@' if at else ''}sentinel/{db}"
    if server_query:
        server_url += "?" + urlencode(server_query)
    try:
        options = redis.connection.parse_url(server_url)  # type: ignore[no-untyped-call]
    except ValueError:
        # redis-py's messages may quote a piece of the URL, which may be a piece of a password.
        raise errors.InvalidArgument(
            "the user info or the options after '?' could not be read: give numbers where "
            "options take numbers, and write a '%' in the user info as %25") from None
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
    if not (minimum.isascii() and minimum.isdigit()):
        raise errors.InvalidArgument(f"min_other_sentinels: got {minimum!r}; must be an integer "
                                     ">= 0")
    return SentinelUrl(sentinels=sentinels, service=service, tls=tls, server_options=options,
                       sentinel_options=sentinel_options, min_other_sentinels=int(minimum))
