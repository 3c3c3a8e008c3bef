"""Checks of a Redis URL that need no connection (and import no Redis client): which query
options it may carry, and whether it uses TLS.

:mod:`antre.connection` runs them before connecting; the operator's spec parser runs them on a
JobQueue's URL, so a bad URL is one clear condition there instead of a failure at every poll.
Sentinel URLs have their own parser (:mod:`antre.sentinel_urls`).
"""

from __future__ import annotations

from typing import Final
from urllib.parse import parse_qsl

from antre import errors

#: Query options a redis://, rediss://, unix:// or redis+cluster:// URL may carry: the ones
#: redis-py converts from a URL, and its string-valued connection options (a test keeps this
#: within what the installed redis-py takes). redis-py hands any other name to its connection
#: class, which fails with a TypeError at the first command; refused here instead, by name.
URL_OPTIONS: Final = frozenset({
    "db", "health_check_interval", "max_connections", "protocol", "retry_on_timeout",
    "socket_connect_timeout", "socket_keepalive", "socket_read_size", "socket_timeout",
    "timeout", "ssl_check_hostname", "ssl_min_version",
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
            f"redis url: {REQUIRE_TLS_ENV} is true, so the URL must use TLS (rediss://, "
            f"rediss+sentinel:// or rediss+cluster://); got {scheme or 'no'} scheme; not "
            f"connecting")


def check_url_options(url: str) -> None:
    """Refuse a query option redis-py would not take (``?sslmode=require``, a typo), naming it
    (never its value)."""
    query = url.partition("?")[2].partition("#")[0]
    for name, _ in parse_qsl(query, keep_blank_values=True):
        if name not in URL_OPTIONS:
            # A name that is no identifier may be part of a password with an unescaped '?'.
            shown = repr(name) if name.isidentifier() and len(name) <= 40 else "(not shown)"
            raise errors.InvalidArgument(
                f"redis url: unknown query option {shown}; the options are "
                f"{', '.join(sorted(URL_OPTIONS))}")
