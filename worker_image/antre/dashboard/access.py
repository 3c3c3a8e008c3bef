"""Who may see and change what: the session middleware, sign-in and sign-out.

Every dashboard request passes :func:`access_middleware`:

- the static files and the sign-in form are open;
- anything else needs a valid session cookie (``HttpOnly``, ``SameSite=Strict``, path ``/ui``,
  ``Secure`` over HTTPS). A page without one redirects to the sign-in form; a live stream or an
  action without one is a 401 and does nothing;
- every POST needs the session's CSRF token in its form, and an ``Origin`` header, when the
  browser sends one, naming this server;
- answers carry a strict Content-Security-Policy (scripts, styles and connections from this
  origin only; no inline script), ``no-store`` caching and anti-framing headers.

Without an API token (``antre api`` run without authentication on purpose) a session is issued
on the first page without asking, so CSRF protection still holds.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Final
from urllib.parse import urlencode

import redis
from aiohttp import web
from multidict import MultiDictProxy

from antre import errors
from antre.dashboard import forwarded, sessions
from antre.dashboard.state import SESSION, Dashboard, PageError, dashboard_of, session_of

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]

LOGIN_COOKIE: Final = "antre_login"
#: Paths below the mount that need no session.
_OPEN: Final = ("/login", "/static/")

CONTENT_SECURITY_POLICY: Final = (
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
    "connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'")


async def read_form(
        request: web.Request) -> MultiDictProxy[str | bytes | bytearray | web.FileField]:
    """The posted form; a body that is not valid UTF-8 (aiohttp raises UnicodeDecodeError on
    it) is a 400 page rather than a 500 with a traceback."""
    try:
        return await request.post()
    except UnicodeDecodeError:
        raise PageError(400, "Bad form", "The form's body is not valid UTF-8; nothing was "
                        "changed.", back=dashboard_of(request).url("/")) from None


def _relative(dashboard: Dashboard, request: web.Request) -> str:
    return request.path[len(dashboard.mount):] or "/"


def safe_return(dashboard: Dashboard, target: str | None, default: str) -> str:
    """``target`` if it is a path inside the dashboard, else ``default`` (no open redirect)."""
    if (target and target.startswith(dashboard.mount + "/") and not target.startswith("//")
            and "\\" not in target and "\n" not in target and "\r" not in target):
        return target
    return default


def set_session_cookie(dashboard: Dashboard, request: web.Request, response: web.StreamResponse,
                       name: str, value: str, max_age_s: int) -> None:
    response.set_cookie(name, value, max_age=max_age_s, path=dashboard.mount, httponly=True,
                        samesite="Strict", secure=_over_https(request))


def secure_headers(response: web.StreamResponse) -> None:
    if response.prepared:  # a live stream sets them before its first byte
        return
    response.headers.setdefault("Content-Security-Policy", CONTENT_SECURITY_POLICY)
    response.headers.setdefault("X-Content-Type-Options", "nosniff")
    response.headers.setdefault("X-Frame-Options", "DENY")
    response.headers.setdefault("Referrer-Policy", "same-origin")
    response.headers.setdefault("Cache-Control", "no-store")


def _tls_ended_before(request: web.Request) -> bool:
    """Whether the request reached this server over HTTPS: directly, or through an Ingress or
    load balancer that ended TLS and says so (``X-Forwarded-Proto``)."""
    forwarded = request.headers.get("X-Forwarded-Proto", "").split(",")[0].strip().lower()
    return request.secure or forwarded == "https"


def _over_https(request: web.Request) -> bool:
    """Whether cookies are marked ``Secure``: the request came over HTTPS, or from a page whose
    origin is https:// (a forged header can only make this stricter)."""
    return _tls_ended_before(request) or request.headers.get("Origin", "").lower().startswith(
        "https://")


def _origin_ok(request: web.Request) -> bool:
    """A browser names the page's origin on every POST; it must be this server's host, and
    https:// when the request came over HTTPS. Behind an Ingress that ends TLS the browser's
    origin is https:// while this server is spoken to over plain HTTP, so a plain-HTTP request
    takes either scheme."""
    origin = request.headers.get("Origin")
    if origin is None:
        return True
    scheme, sep, host = origin.partition("://")
    allowed = ("https",) if _tls_ended_before(request) else ("http", "https")
    return bool(sep) and scheme.lower() in allowed and host.lower() == request.host.lower()


@web.middleware
async def access_middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
    dashboard = dashboard_of(request)
    path = _relative(dashboard, request)
    session = dashboard.signer.verify(request.cookies.get(sessions.COOKIE_NAME))
    issued: str | None = None
    if session is None and dashboard.token is None and request.method == "GET":
        session, issued = dashboard.signer.issue()
    request[SESSION] = session
    try:
        if not path.startswith(_OPEN):
            if session is None:
                if request.method == "GET" and not path.startswith("/live/"):
                    target = request.path_qs
                    raise web.HTTPSeeOther(dashboard.url("/login?" + urlencode({"next": target})))
                raise PageError(401, "Sign in first",
                                "This needs a signed-in session; nothing was changed.",
                                back=dashboard.url("/login"))
            if request.method == "POST":
                if not _origin_ok(request):
                    raise PageError(403, "Refused", "The request came from another site; nothing "
                                    "was changed.", back=dashboard.url("/"))
                form = await read_form(request)
                given = form.get("csrf")
                if not dashboard.signer.check_csrf(session, given if isinstance(given, str)
                                                   else None):
                    raise PageError(403, "Refused", "The form is missing its security token or "
                                    "comes from an older session; reload the page and try again. "
                                    "Nothing was changed.", back=dashboard.url("/"))
        response = await handler(request)
    except web.HTTPRedirection as redirect:
        response = web.Response(status=redirect.status,
                                headers={"Location": redirect.headers.get("Location", "")})
    except PageError as exc:
        response = error_page(dashboard, request, exc)
    except web.HTTPException as exc:  # aiohttp's own: unknown path, wrong method
        response = error_page(dashboard, request, PageError(
            exc.status, exc.reason, "There is no such page here.", back=dashboard.url("/")))
    except (errors.RedisRefused, errors.NotReplicated) as exc:
        # Redis answered: it refused the change (full, a read-only replica), or made it without
        # enough replicas confirming it in time. "Cannot be reached" would be wrong, and for an
        # unconfirmed change misleading: it is done on the primary.
        title = ("Not confirmed by replicas" if isinstance(exc, errors.NotReplicated)
                 else "Redis refused the change")
        response = error_page(dashboard, request, PageError(
            503, title, f"{exc}", back=dashboard.url("/")))
        response.headers["Retry-After"] = "2"
    except (errors.RedisUnavailable, redis.ConnectionError, redis.TimeoutError):
        response = error_page(dashboard, request, PageError(
            503, "Redis is unavailable", "The queue's Redis cannot be reached right now; "
            "reload the page in a moment.", back=dashboard.url("/")))
        response.headers["Retry-After"] = "2"
    if issued is not None:
        set_session_cookie(dashboard, request, response, sessions.COOKIE_NAME, issued,
                           dashboard.signer.ttl_s)
    if not path.startswith("/static/"):
        secure_headers(response)
    return response


def error_page(dashboard: Dashboard, request: web.Request, exc: PageError) -> web.Response:
    body = dashboard.render("message.html", heading=exc.heading, text=exc.text, back=exc.back,
                            **page_context(dashboard, request))
    return web.Response(text=body, status=exc.status, content_type="text/html")


def page_context(dashboard: Dashboard, request: web.Request) -> dict[str, object]:
    """What the base template needs on every page."""
    session = session_of(request)
    return {"csrf": dashboard.signer.csrf_token(session) if session else "",
            "signed_in": session is not None, "token_required": dashboard.token is not None,
            "read_only": dashboard.settings.read_only}


# -- sign-in and sign-out ----------------------------------------------------------------------------

def _login_form(dashboard: Dashboard, request: web.Request, *, next_path: str, error: str = "",
                check_url: str = "", status: int = 200) -> web.Response:
    # Keep the form's token across reloads (and the meta refresh below): one per browser.
    login_session = dashboard.login_signer.verify(request.cookies.get(LOGIN_COOKIE))
    cookie = None
    if login_session is None:
        login_session, cookie = dashboard.login_signer.issue()
    body = dashboard.render("login.html", next=next_path, error=error, check_url=check_url,
                            **{**page_context(dashboard, request),
                               "csrf": dashboard.login_signer.csrf_token(login_session)})
    response = web.Response(text=body, status=status, content_type="text/html")
    if cookie is not None:
        set_session_cookie(dashboard, request, response, LOGIN_COOKIE, cookie,
                           dashboard.login_signer.ttl_s)
    return response


async def login_page(request: web.Request) -> web.StreamResponse:
    dashboard = dashboard_of(request)
    next_path = safe_return(dashboard, request.query.get("next"), dashboard.url("/"))
    if session_of(request) is not None:
        raise web.HTTPSeeOther(next_path)
    # A link from another site arrives without the SameSite=Strict cookie (the browser says so
    # in Sec-Fetch-Site, also after our redirect here); one reload of this page from our own
    # origin (a meta refresh, no script) brings the cookie if the browser has one.
    cross_site = request.headers.get("Sec-Fetch-Site") in ("cross-site", "same-site")
    check_url = "" if not cross_site or request.query.get("checked") else dashboard.url(
        "/login?" + urlencode({"next": next_path, "checked": "1"}))
    return _login_form(dashboard, request, next_path=next_path, check_url=check_url)


async def login(request: web.Request) -> web.StreamResponse:
    dashboard = dashboard_of(request)
    form = await read_form(request)
    next_value = form.get("next")
    next_path = safe_return(dashboard, next_value if isinstance(next_value, str) else None,
                            dashboard.url("/"))
    if dashboard.token is None:
        raise web.HTTPSeeOther(next_path)
    client = forwarded.client_address(request.remote, request.headers.getall("X-Forwarded-For", []),
                                      dashboard.trusted_proxies)
    wait_s = dashboard.throttle.retry_after_s(client)
    if wait_s > 0:
        response = _login_form(dashboard, request, next_path=next_path, status=429,
                               error=f"Too many wrong tokens from this address; try again in "
                                     f"{int(wait_s) + 1} s.")
        response.headers["Retry-After"] = str(int(wait_s) + 1)
        return response
    login_session = dashboard.login_signer.verify(request.cookies.get(LOGIN_COOKIE))
    given_csrf = form.get("csrf")
    if login_session is None or not _origin_ok(request) or not dashboard.login_signer.check_csrf(
            login_session, given_csrf if isinstance(given_csrf, str) else None):
        return _login_form(dashboard, request, next_path=next_path, status=403,
                           error="The sign-in form expired; try again.")
    token = form.get("token")
    if not isinstance(token, str) or not sessions.token_matches(token, dashboard.token):
        dashboard.throttle.failed(client)
        return _login_form(dashboard, request, next_path=next_path, status=401,
                           error="That is not this API's token.")
    dashboard.throttle.succeeded(client)
    _session, cookie = dashboard.signer.issue()
    response = web.Response(status=303, headers={"Location": next_path})
    set_session_cookie(dashboard, request, response, sessions.COOKIE_NAME, cookie,
                       dashboard.signer.ttl_s)
    response.del_cookie(LOGIN_COOKIE, path=dashboard.mount)
    return response


async def logout(request: web.Request) -> web.StreamResponse:
    dashboard = dashboard_of(request)
    response = web.Response(status=303, headers={"Location": dashboard.url("/login")})
    response.del_cookie(sessions.COOKIE_NAME, path=dashboard.mount)
    return response
