"""Which of a Redis URL's query options the installed redis-py's clients take, read from the
clients themselves: an option one of them does not take failed only at its first command, with
a TypeError and a traceback (the sync cluster client drops an option it does not know without
a word), so :mod:`antre.connection` refuses it before connecting, in one line naming the first
release that takes it.

What the installed redis-py takes is found from its own code: a client's connection class (or,
for the asyncio cluster client, the client itself) takes the parameters its constructors name,
up the inheritance chain to the first constructor without ``**kwargs``; the sync cluster client
passes on only the names in ``redis.cluster.REDIS_ALLOWED_KEYS``; a numeric option reaches the
socket or the TLS context as text, and fails there, unless redis-py's URL parser converts it
(``URL_QUERY_ARGUMENT_PARSERS``). :data:`SINCE` only words the refusal: tests check it against
what is found, on the redis-py the suite runs and on the floor version (5.0.1).

Measured with redis-py 5.0.1 to 8.2.0 against TLS redis-server, Sentinel and Cluster
deployments (each option with a good value, each client): what fails where is :data:`SINCE`
and :data:`NOT_TAKEN`; other options of :data:`antre.redis_urls.URL_OPTIONS` pass everywhere
(the sync cluster client drops ``health_check_interval``, and ``socket_read_size`` in older
releases: tuning only, so they are let through).
"""

from __future__ import annotations

import functools
import inspect
import re
from collections.abc import Iterable, Mapping
from typing import Any, Final

import redis
import redis.asyncio.cluster
import redis.asyncio.connection
import redis.cluster
import redis.connection

from antre import errors, redis_urls

SYNC: Final = "sync"
ASYNCIO: Final = "asyncio"
SYNC_CLUSTER: Final = "sync cluster"
ASYNCIO_CLUSTER: Final = "asyncio cluster"
#: Who uses each client, for the messages (Sentinel URLs get the plain clients).
USERS: Final = {
    SYNC: "antre.Queue and the command line",
    ASYNCIO: "the worker, the API and antre.AsyncQueue",
    SYNC_CLUSTER: "antre.Queue and the command line",
    ASYNCIO_CLUSTER: "the worker, the API and antre.AsyncQueue",
}

#: The first redis-py release whose client takes the option from a URL. Before it: the
#: asyncio connections took no ``ssl_password`` nor ``ssl_ca_path`` (7.2); none took
#: ``ssl_ciphers`` (5.0.4); ``ssl_min_version`` (5.0.2) and ``socket_read_size`` reached the TLS
#: context and the socket as text until redis-py's URL parser converted them (8.1, 8.0); the
#: sync cluster client dropped ``ssl_check_hostname`` (6.1), ``ssl_ca_path`` (7.2),
#: ``ssl_min_version`` and ``ssl_ciphers`` (8.2): another TLS than the URL asked for, without a
#: word.
SINCE: Final[dict[tuple[str, str], str]] = {
    (SYNC, "ssl_ciphers"): "5.0.4",
    (SYNC, "ssl_min_version"): "8.1",
    (SYNC, "socket_read_size"): "8.0",
    (ASYNCIO, "ssl_password"): "7.2",
    (ASYNCIO, "ssl_ca_path"): "7.2",
    (ASYNCIO, "ssl_ciphers"): "5.0.4",
    (ASYNCIO, "ssl_min_version"): "8.1",
    (ASYNCIO, "socket_read_size"): "8.0",
    (SYNC_CLUSTER, "ssl_check_hostname"): "6.1",
    (SYNC_CLUSTER, "ssl_ca_path"): "7.2",
    (SYNC_CLUSTER, "ssl_min_version"): "8.2",
    (SYNC_CLUSTER, "ssl_ciphers"): "8.2",
    (ASYNCIO_CLUSTER, "ssl_ciphers"): "5.0.4",
    (ASYNCIO_CLUSTER, "ssl_min_version"): "8.1",
    (ASYNCIO_CLUSTER, "socket_read_size"): "8.0",
}
#: Options no release up to 8.2.0 takes in that client.
NOT_TAKEN: Final = frozenset({(ASYNCIO_CLUSTER, "ssl_password"),
                              (ASYNCIO_CLUSTER, "ssl_ca_path"),
                              (ASYNCIO_CLUSTER, "retry_on_timeout")})
#: Options redis-py uses as numbers: taken only if its URL parser converts them from text.
NUMERIC: Final = frozenset({"socket_read_size", "ssl_min_version"})
#: Taken by the connection pool, not the connections.
POOL_OPTIONS: Final = frozenset({"max_connections"})


def version(text: str) -> tuple[int, ...]:
    """``"7.2.0"`` -> (7, 2, 0); a pre-release's suffix is dropped (``"8.0.0b1"`` -> (8, 0, 0))."""
    parts = []
    for part in text.split(".")[:3]:
        digits = re.match(r"[0-9]+", part)
        if digits is None:
            break
        parts.append(int(digits.group()))
    return tuple(parts)


def refusal(names: Iterable[str], *, client: str, takes: frozenset[str] | None,
            installed: str) -> str | None:
    """The line refusing the first of ``names`` the client does not take, or None.

    ``takes``: the options the client takes from a URL (None: it cannot be told, nothing is
    refused); ``installed``: redis-py's version, for the message."""
    if takes is None:
        return None
    for name in names:
        if name in takes:
            continue
        since = SINCE.get((client, name))
        if since is not None and version(installed) < version(since):
            return (f"redis url: {name} needs redis-py {since} or later (installed: "
                    f"{installed}) for the {client} client, which {USERS[client]} use; "
                    f"upgrade redis or remove the parameter")
        return (f"redis url: {name}: redis-py {installed} does not take it in the {client} "
                f"client, which {USERS[client]} use; remove the parameter")
    return None


def _init_parameters(cls: type) -> frozenset[str] | None:
    """The keyword parameters ``cls(...)`` takes: its constructors' up the inheritance chain,
    to the first one without ``**kwargs`` (None if every one passes unknown names on)."""
    names: set[str] = set()
    for klass in cls.__mro__:
        init = klass.__dict__.get("__init__")
        if init is None or klass is object:
            continue
        parameters = inspect.signature(init).parameters.values()
        names |= {p.name for p in parameters
                  if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)}
        if not any(p.kind is p.VAR_KEYWORD for p in parameters):
            return frozenset(names)
    return None


@functools.cache
def constructor_takes(cls: type, name: str) -> bool:
    """Whether ``cls(...)`` takes the keyword ``name`` (True when it cannot be told: every
    constructor passes unknown names on)."""
    names = _init_parameters(cls)
    return names is None or name in names


def _converted(module: Any) -> frozenset[str] | None:
    parsers = getattr(module, "URL_QUERY_ARGUMENT_PARSERS", None)
    return frozenset(parsers) if isinstance(parsers, Mapping) else None


@functools.cache
def taken(client: str, *, tls: bool, sync_parser: bool | None = None) -> frozenset[str] | None:
    """The options of :data:`antre.redis_urls.URL_OPTIONS` the installed redis-py's ``client``
    takes from a URL (None: it cannot be told). ``sync_parser``: whether the sync URL parser
    reads them (by default the client's own; antre parses Sentinel URLs with the sync one)."""
    sync = client in (SYNC, SYNC_CLUSTER)
    if client == ASYNCIO_CLUSTER:
        passed_on = _init_parameters(redis.asyncio.cluster.RedisCluster)
    else:
        module: Any = redis.connection if sync else redis.asyncio.connection
        connection = _init_parameters(module.SSLConnection if tls else module.Connection)
        passed_on = None if connection is None else connection | POOL_OPTIONS
    if passed_on is None:
        return None
    converts = _converted(redis.connection if (sync if sync_parser is None else sync_parser)
                          else redis.asyncio.connection)
    dropped: frozenset[str] = frozenset()
    allowed = getattr(redis.cluster, "REDIS_ALLOWED_KEYS", None)
    if client == SYNC_CLUSTER and allowed is not None:
        # It drops every other name: refused for TLS options only (losing a tuning option is
        # harmless, and it was let through before).
        dropped = frozenset(name for name in redis_urls.URL_OPTIONS
                            if name not in allowed and not name.startswith("ssl_"))
        passed_on &= frozenset(allowed)
    return dropped | frozenset(
        name for name in redis_urls.URL_OPTIONS if name in passed_on
        and (name not in NUMERIC or converts is None or name in converts))


def check(names: Iterable[str], *, client: str, tls: bool,
          sync_parser: bool | None = None) -> None:
    """Refuse the first of ``names`` the installed redis-py's ``client`` does not take (see
    :func:`taken`)."""
    takes = taken(client, tls=tls, sync_parser=sync_parser)
    message = refusal(names, client=client, takes=takes, installed=redis.__version__)
    if message is not None:
        raise errors.InvalidArgument(message)
