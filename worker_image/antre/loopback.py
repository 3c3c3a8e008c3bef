"""Which hosts are this machine's loopback: the addresses 127.0.0.0/8 and ::1, the name
``localhost``, and names that resolve only to those. An API without a token on loopback answers
only requests whose Host is one of them (:mod:`antre.api`), since a web page whose DNS name
rebinds to a loopback address reaches the port from the user's browser otherwise."""

from __future__ import annotations

import ipaddress
import socket
from typing import Final

LOCALHOST: Final = "localhost"


def is_loopback_address(text: str) -> bool:
    """Whether ``text`` is a loopback IP address (``127.0.0.2``, ``::1``), not a name."""
    try:
        return ipaddress.ip_address(text.partition("%")[0]).is_loopback
    except ValueError:
        return False


def names_loopback(host: str) -> bool:
    """Whether a Host header's name (port and brackets removed, lower case) addresses this
    machine by a loopback name: ``localhost`` or a loopback address. Never resolves: the name a
    rebinding page uses resolves to loopback too."""
    return host == LOCALHOST or is_loopback_address(host)


def listens_on_loopback(host: str) -> bool:
    """Whether listening on ``host`` serves loopback only: a loopback address, or a name whose
    every address is one (``localhost``; a Debian host name at 127.0.1.1)."""
    if is_loopback_address(host):
        return True
    try:
        found = socket.getaddrinfo(host, None, proto=socket.IPPROTO_TCP)
    except (OSError, UnicodeError):
        return host.lower().rstrip(".") == LOCALHOST
    return bool(found) and all(is_loopback_address(str(info[4][0])) for info in found)
