"""The client address the sign-in throttle counts (:mod:`antre.dashboard.forwarded`), as a pure
function: X-Forwarded-For is believed only from the proxies named, and only as far as they
wrote it."""

from __future__ import annotations

import pytest
from antre import errors
from antre.dashboard.forwarded import client_address, proxy_networks

INGRESS = proxy_networks("10.244.0.0/16, fd00::/8")


@pytest.mark.parametrize("remote, forwarded_for, client", [
    pytest.param("203.0.113.7", [], "203.0.113.7", id="direct"),
    pytest.param("203.0.113.7", ["198.51.100.1"], "203.0.113.7", id="not-from-a-proxy"),
    pytest.param("10.244.1.5", [], "10.244.1.5", id="proxy-without-header"),
    pytest.param("10.244.1.5", ["198.51.100.1"], "198.51.100.1", id="through-the-ingress"),
    pytest.param("10.244.1.5", ["6.6.6.6, 198.51.100.1"], "198.51.100.1", id="invented-left"),
    pytest.param("10.244.1.5", ["198.51.100.1, 10.244.2.9"], "198.51.100.1", id="two-proxies"),
    pytest.param("10.244.1.5", ["6.6.6.6", "198.51.100.1"], "198.51.100.1",
                 id="two-headers"),
    pytest.param("10.244.1.5", ["10.244.3.3, 10.244.2.9"], "10.244.3.3", id="all-proxies"),
    pytest.param("10.244.1.5", ["198.51.100.1, unknown"], "10.244.1.5", id="not-an-address"),
    pytest.param("fd00::5", ["2001:db8::1"], "2001:db8::1", id="ipv6"),
    pytest.param(None, ["198.51.100.1"], "?", id="no-peer"),
])
def test_the_client_is_the_last_address_a_trusted_proxy_wrote(
        remote: str | None, forwarded_for: list[str], client: str) -> None:
    assert client_address(remote, forwarded_for, INGRESS) == client


def test_without_trusted_proxies_the_header_is_ignored() -> None:
    assert client_address("10.244.1.5", ["198.51.100.1"], ()) == "10.244.1.5"


def test_a_proxy_list_that_is_not_one_names_the_entry() -> None:
    assert proxy_networks("") == () and proxy_networks(" 10.0.0.1 ,") == proxy_networks(
        "10.0.0.1/32")
    with pytest.raises(errors.InvalidArgument, match="got 'ingress'; must be IP addresses or "
                                                     "CIDR ranges"):
        proxy_networks("10.0.0.0/8,ingress")
