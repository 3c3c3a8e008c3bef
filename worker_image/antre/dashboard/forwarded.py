"""Which client a request comes from, for the sign-in throttle.

Behind an Ingress controller or any other reverse proxy every request arrives from the proxy's
address, so counting wrong tokens per connecting address would let one visitor lock every
operator out. With the proxies named (``--dashboard-trusted-proxies``) the client is the last
address in ``X-Forwarded-For`` that is not one of them: each proxy appends the address it saw,
so whatever stands left of that was written by the client and may be invented. Without them,
the header is ignored: anyone could send one.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Sequence

from antre import errors

Network = ipaddress.IPv4Network | ipaddress.IPv6Network


def proxy_networks(text: str) -> tuple[Network, ...]:
    """The comma-separated addresses and CIDR ranges of the trusted proxies."""
    networks = []
    for part in (part.strip() for part in text.split(",")):
        if not part:
            continue
        try:
            networks.append(ipaddress.ip_network(part, strict=False))
        except ValueError:
            raise errors.InvalidArgument(
                f"trusted_proxies: got {part!r}; must be IP addresses or CIDR ranges separated "
                f"by commas (10.0.0.0/8,fd00::/8)") from None
    return tuple(networks)


def client_address(remote: str | None, forwarded_for: Sequence[str],
                   trusted: Sequence[Network]) -> str:
    """``remote`` (the connecting address), unless it is a trusted proxy: then the last address
    of the ``X-Forwarded-For`` headers (in order) that is not. An entry that is no address stops
    the walk at the proxy that wrote it: a proxy appends addresses only."""
    peer = remote or "?"
    if not trusted or not _trusted(peer, trusted):
        return peer
    hops = [hop.strip() for header in forwarded_for for hop in header.split(",")]
    client = peer
    for hop in reversed(hops):
        address = _address(hop)
        if address is None:
            break
        client = str(address)
        if not any(address in network for network in trusted):
            break
    return client


def _address(text: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address | None:
    try:
        return ipaddress.ip_address(text)
    except ValueError:
        return None


def _trusted(text: str, trusted: Sequence[Network]) -> bool:
    address = _address(text)
    return address is not None and any(address in network for network in trusted)
