"""Session cookies, CSRF tokens and the sign-in throttle, as pure functions.

Covers: a cookie verifies under the key of the token that issued it and under no other (a new
token ends every session); a changed expiry, id or signature, a truncated or foreign value, an
expired cookie are refused; CSRF tokens are bound to their session; the throttle lets an address
try again once its oldest failure leaves the window, forgets an address after a success, and
keeps at most ``max_clients`` addresses.
"""

from __future__ import annotations

import pytest
from antre.dashboard import sessions


def signer(token: str = "t0k3n", ttl_s: int = 60) -> sessions.SessionSigner:
    return sessions.SessionSigner(sessions.signing_key(token), ttl_s=ttl_s)


def test_cookie_round_trip_and_token_rotation() -> None:
    session, cookie = signer().issue(now_s=1000)
    assert signer().verify(cookie, now_s=1030) == session
    assert signer("another").verify(cookie, now_s=1030) is None
    assert signer().verify(cookie, now_s=1061) is None  # expired


@pytest.mark.parametrize("tamper", [
    pytest.param(lambda c: c.replace("v1.", "v2.", 1), id="version"),
    pytest.param(lambda c: ".".join([c.split(".")[0], "9999999999", *c.split(".")[2:]]),
                 id="expiry"),
    pytest.param(lambda c: ".".join([*c.split(".")[:2], "other-id", c.split(".")[3]]), id="id"),
    pytest.param(lambda c: c[:-3] + "AAA", id="signature"),
    pytest.param(lambda c: c.rsplit(".", 1)[0], id="truncated"),
    pytest.param(lambda c: "", id="empty"),
    pytest.param(lambda c: c + "." + "x" * 300, id="oversized"),
])
def test_tampered_cookies_are_refused(tamper) -> None:  # type: ignore[no-untyped-def]
    _session, cookie = signer().issue(now_s=1000)
    assert signer().verify(tamper(cookie), now_s=1001) is None


def test_csrf_token_is_bound_to_its_session() -> None:
    first, _ = signer().issue()
    second, _ = signer().issue()
    token = signer().csrf_token(first)
    assert signer().check_csrf(first, token)
    assert not signer().check_csrf(second, token)
    assert not signer().check_csrf(first, None) and not signer().check_csrf(first, "")


def test_without_a_token_each_process_has_its_own_key() -> None:
    assert sessions.signing_key(None) != sessions.signing_key(None)
    assert sessions.signing_key("a") == sessions.signing_key("a")


def test_token_comparison_ignores_surrounding_whitespace() -> None:
    assert sessions.token_matches(" t0k3n\n", "t0k3n")
    assert not sessions.token_matches("t0k3", "t0k3n")


def test_throttle_window_success_and_bound() -> None:
    throttle = sessions.LoginThrottle(max_failures=3, window_s=10, max_clients=2)
    for at in (0, 1, 2):
        assert throttle.retry_after_s("a", now_s=at) == 0
        throttle.failed("a", now_s=at)
    assert throttle.retry_after_s("a", now_s=3) == pytest.approx(7)
    assert throttle.retry_after_s("a", now_s=10.5) == 0  # the first failure left the window
    throttle.failed("b", now_s=11)
    throttle.succeeded("b")
    assert throttle.retry_after_s("b", now_s=11) == 0
    throttle.failed("c", now_s=12)
    throttle.failed("d", now_s=12)  # a third address: the stalest ("a") is forgotten
    assert set(throttle._failures) == {"c", "d"}
