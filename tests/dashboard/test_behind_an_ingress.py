"""The dashboard behind an Ingress or load balancer that ends TLS: the browser's origin is
https://<host> while the API is spoken to over plain HTTP. Signing in works, the cookies are
marked Secure, and a form posted from another site is still refused."""

from __future__ import annotations

from typing import Any

from aiohttp.test_utils import TestClient
from antre.dashboard.access import LOGIN_COOKIE
from antre.dashboard.sessions import COOKIE_NAME

from .conftest import TOKEN, csrf_of

HOST = "queue.example.com"
THROUGH_THE_INGRESS = {"Host": HOST, "X-Forwarded-Proto": "https"}


async def _form(ui: TestClient[Any, Any]) -> dict[str, str]:
    """The sign-in form's CSRF token, and the headers of its POST as a browser on https://HOST
    sends them (a Secure cookie is sent back over HTTPS only, so the test client, speaking plain
    HTTP as the Ingress does, is given it by hand)."""
    ui.session.cookie_jar.clear()
    page = await ui.get("/ui/login", headers=THROUGH_THE_INGRESS)
    assert page.status == 200
    [cookie] = [c for c in page.headers.getall("Set-Cookie") if c.startswith(LOGIN_COOKIE + "=")]
    assert "Secure" in cookie
    return {"csrf": csrf_of(await page.text()), "Cookie": cookie.split(";", 1)[0]}


async def test_signing_in_through_a_tls_ingress_works_and_marks_the_cookie_secure(
        ui: TestClient[Any, Any]) -> None:
    form = await _form(ui)
    answer = await ui.post("/ui/login", allow_redirects=False,
                           headers={**THROUGH_THE_INGRESS, "Origin": f"https://{HOST}",
                                    "Cookie": form["Cookie"]},
                           data={"csrf": form["csrf"], "token": TOKEN, "next": "/ui/"})
    assert answer.status == 303, await answer.text()
    [cookie] = [c for c in answer.headers.getall("Set-Cookie") if c.startswith(COOKIE_NAME + "=")]
    assert "Secure" in cookie and "HttpOnly" in cookie and "SameSite=Strict" in cookie


async def test_a_form_posted_from_another_site_is_still_refused(ui: TestClient[Any, Any]) -> None:
    # http://HOST too: the request came over HTTPS, so a plain-HTTP page on the same name (one
    # a network attacker could inject) is another origin.
    for origin in ("https://evil.example", f"https://{HOST}.evil.example", "null",
                   f"ftp://{HOST}", f"http://{HOST}"):
        form = await _form(ui)
        answer = await ui.post("/ui/login", allow_redirects=False,
                               headers={**THROUGH_THE_INGRESS, "Origin": origin,
                                        "Cookie": form["Cookie"]},
                               data={"csrf": form["csrf"], "token": TOKEN, "next": "/ui/"})
        assert answer.status == 403, origin
        assert answer.headers.get("Location") is None
