"""Checks of a Redis URL that need no connection (and import no Redis client): its database
path, which query options it may carry, and whether it uses TLS.

:mod:`antre.connection` runs them before connecting; the operator's spec parser runs them on a
JobQueue's URL, so a bad URL is one clear condition there instead of a failure at every poll.
Sentinel URLs have their own parser (:mod:`antre.sentinel_urls`).
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Iterable
from typing import Final
from urllib.parse import parse_qsl

from antre import errors

#: Query options a redis://, rediss://, unix:// or redis+cluster:// URL may carry: the ones
#: redis-py converts from a URL, and its string-valued connection options (a test keeps this
#: within what the installed redis-py takes). redis-py hands any other name to its connection
#: class, which fails with a TypeError at the first command; refused here instead, by name.
#: Not ``timeout``, which redis-py converts but only its BlockingConnectionPool takes: antre's
#: clients handed it to their connections, a TypeError on every release.
URL_OPTIONS: Final = frozenset({
    "db", "health_check_interval", "max_connections", "protocol", "retry_on_timeout",
    "socket_connect_timeout", "socket_keepalive", "socket_read_size", "socket_timeout",
    "ssl_check_hostname", "ssl_min_version",
    "client_name", "username", "password", "ssl_ca_certs", "ssl_ca_path", "ssl_certfile",
    "ssl_keyfile", "ssl_password", "ssl_cert_reqs", "ssl_ciphers",
})

#: With this environment variable true (or ``--redis-tls``), a process refuses every URL
#: without TLS before connecting: the operator sets it for a JobQueue with spec.redis.tls, so a
#: plain-text URL put in its Secret never carries the password over the network.
REQUIRE_TLS_ENV: Final = "ANTRE_REDIS_TLS"
TLS_SCHEMES: Final = ("rediss", "rediss+sentinel", "rediss+cluster")


def require_tls(url: str) -> None:
    """Refuse ``url`` unless its scheme is a TLS one; the message never shows the URL."""
    scheme = url.split("://", 1)[0].lower() if "://" in url else ""
    if scheme not in TLS_SCHEMES:
        raise errors.InvalidArgument(
            f"redis url: --redis-tls ({REQUIRE_TLS_ENV}) is set, so the URL must use TLS (rediss://, "
            f"rediss+sentinel:// or rediss+cluster://); got {scheme or 'no'} scheme; not "
            f"connecting")


def _whole(text: str) -> bool:
    return re.fullmatch(r"[0-9]{1,9}", text) is not None


def _seconds(text: str) -> bool:
    try:
        value = float(text)
    except ValueError:
        return False
    return math.isfinite(value) and value >= 0


#: redis-py's own spellings of a boolean (``to_bool``), and the empty value (its default).
_BOOLEANS: Final = frozenset({"", "0", "1", "f", "false", "n", "no", "t", "true", "y", "yes"})

#: The options redis-py converts from text, each with its check and what it allows: a value it
#: cannot convert would otherwise fail only at connect time (and pass for an unreachable Redis),
#: and one it converts wrongly (any text is a true boolean to it) would pass silently.
_VALUE_CHECKS: Final[dict[str, tuple[Callable[[str], bool], str]]] = {
    **{name: (_whole, "a whole number from 0 to 999999999")
       for name in ("db", "socket_read_size", "max_connections", "health_check_interval",
                    "ssl_min_version")},
    "protocol": (lambda text: text in ("2", "3"), "2 or 3"),
    **{name: (_seconds, "a number of seconds >= 0 (e.g. 5 or 0.5)")
       for name in ("socket_timeout", "socket_connect_timeout")},
    **{name: (lambda text: text.lower() in _BOOLEANS, "true or false (or yes/no, 1/0)")
       for name in ("socket_keepalive", "retry_on_timeout", "ssl_check_hostname")},
}
#: Longest option value quoted in a message.
_MAX_SHOWN_CHARS: Final = 40


def check_options(pairs: Iterable[tuple[str, str]], *, allowed: frozenset[str],
                  show_values: bool = True) -> None:
    """Refuse a query option not in ``allowed`` (naming it, never its value), or one whose
    value redis-py cannot take (naming it, the value unless ``show_values`` is false or it is
    long, and what it allows). The messages start with the option: callers say where."""
    for name, value in pairs:
        if name not in allowed:
            # A name that is no identifier may be part of a password with an unescaped '?'.
            shown = repr(name) if name.isidentifier() and len(name) <= 40 else "(not shown)"
            raise errors.InvalidArgument(
                f"unknown query option {shown}; the options are {', '.join(sorted(allowed))}")
        check = _VALUE_CHECKS.get(name)
        # An empty value is no value: redis-py leaves the option at its default.
        if check is not None and value and not check[0](value):
            got = repr(value) if show_values and len(value) <= _MAX_SHOWN_CHARS else "(not shown)"
            raise errors.InvalidArgument(f"query option {name}: got {got}; must be {check[1]}")


def check_transport_options(names: Iterable[str], *, scheme: str) -> None:
    """Refuse an option the URL's kind of connection has no use for: a TLS option (``ssl_*``)
    without TLS, ``socket_keepalive`` on a unix socket. redis-py hands them to a connection
    class that takes no such argument: a TypeError at the first command, on every release. The
    messages start with the option: callers say where."""
    scheme = scheme.lower()
    for name in names:
        if name.startswith("ssl_") and scheme not in TLS_SCHEMES:
            raise errors.InvalidArgument(
                f"query option {name}: a TLS option, and the scheme is {scheme}:// (no TLS); "
                f"use rediss://, rediss+sentinel:// or rediss+cluster://, or remove the option")
        if name == "socket_keepalive" and scheme == "unix":
            raise errors.InvalidArgument(
                "query option socket_keepalive: a TCP option, and the scheme is unix:// (a "
                "local socket); remove the option")


def check_url_options(url: str) -> None:
    """Refuse a query option redis-py would not take (``?sslmode=require``, a typo, a TLS
    option without TLS), or a value it would not take (``?socket_timeout=abc``), in one line
    naming the option."""
    query = url.partition("?")[2].partition("#")[0]
    try:
        # An '@' after the '?' means the '?' may be a password's, unescaped: no value shown.
        pairs = parse_qsl(query, keep_blank_values=True)
        check_options(pairs, allowed=URL_OPTIONS, show_values="@" not in query)
        check_transport_options((name for name, _ in pairs), scheme=url.partition("://")[0])
    except errors.InvalidArgument as exc:
        raise errors.InvalidArgument(f"redis url: {exc}") from None


#: Schemes whose URL path is the database number (unix:// has the socket's path there, and
#: takes ?db=; Sentinel URLs have /service/db, checked by their own parser).
DATABASE_PATH_SCHEMES: Final = ("redis", "rediss", "redis+cluster", "rediss+cluster")


def check_database_path(url: str) -> None:
    """Refuse a path that is not a database number (``/abc``, ``/1x``, ``/0/1``): redis-py
    would silently use database 0 for the first two and database 1 (the digits run together)
    for the last, so jobs would go to another database than the operator reads."""
    scheme, _, rest = url.partition("://")
    if scheme.lower() not in DATABASE_PATH_SCHEMES:
        return
    # After the last '@', as connection.redact reads it: never a piece of the password.
    location = rest.rpartition("@")[2].partition("?")[0].partition("#")[0]
    path = location.partition("/")[2]
    if path.endswith("/"):
        path = path[:-1]  # redis://host/0/ is database 0 to redis-py too
    if path and not _whole(path):
        shown = repr(path) if len(path) <= _MAX_SHOWN_CHARS else "(not shown)"
        raise errors.InvalidArgument(
            f"redis url: database {shown}: the path must be a database number from 0 to "
            f"999999999 and nothing else (e.g. redis://host:6379/0), or empty for 0")


def check_url(url: str) -> None:
    """Every check of a redis://, rediss://, unix:// or cluster URL that needs no connection."""
    check_database_path(url)
    check_url_options(url)
