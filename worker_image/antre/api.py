"""The HTTP producer API (``antre api``): enqueue, job state, stats and the dead-letter list.

An aiohttp application over :class:`antre.AsyncQueue`; the OpenAPI document it serves is built by
:mod:`antre.openapi`, whose limits the validation here imports. It fails closed: it serves only
the queues it was started for (403 for any other), and needs a bearer token unless started with
an explicit ``anonymous`` (``--no-auth``). Middlewares, outermost first:

- ``errors``: every failure becomes a JSON ``{"error", "message"[, "field"]}`` body. Redis being
  unreachable is a 503 with ``Retry-After``; anything unexpected is logged with its traceback and
  answered with a bare 500 (no internals leak to clients).
- ``auth``: ``/v1/`` (and ``/metrics`` with ``metrics_auth``) needs ``Authorization: Bearer
  <token>``, compared in constant time; no part of a wrong header is echoed. Probes and
  /openapi.json stay open, as a kubelet cannot hold the token.
- ``query``: query parameters the document does not list are refused with a 400 naming them.

:func:`start` serves the app with a cap on open connections; a request body must arrive within
``body_timeout_s``.
"""

from __future__ import annotations

import asyncio
import dataclasses
import hmac
import json
import logging
import re
import secrets
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Final

import redis
from aiohttp import web
from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest
from prometheus_client.exposition import CONTENT_TYPE_LATEST

from antre import __version__, errors, fields, keys, limits, loopback, openapi, settings, tracing
from antre.client import AsyncQueue
from antre.dashboard import app as dashboard_app
from antre.dashboard.state import DashboardSettings
from antre.depth_metrics import DepthCollector
from antre.fields import setting
from antre.protocol import scripts
from antre.protocol.depth import Depth

log = logging.getLogger("antre.api")

DEFAULT_PORT: Final = 8080
#: Largest request body accepted; the payload limit of the queue (256 KiB) applies on top.
DEFAULT_MAX_BODY_BYTES: Final = 1024 * 1024
#: Seconds a client has to send a request body once its headers are in.
DEFAULT_BODY_TIMEOUT_S: Final = 10.0
#: Connections open at once; more are answered 503 and closed at once.
DEFAULT_MAX_CONNECTIONS: Final = 512
#: Seconds the rest of an unread body is drained after an early answer, before closing.
LINGERING_S: Final = 1.0
#: Seconds a client should wait after a 503 before retrying.
RETRY_AFTER_S: Final = 1
#: Paths served without the token: probes and the API description (and /metrics unless
#: ``metrics_auth``).
OPEN_PATHS: Final = frozenset({"/healthz", "/readyz", "/openapi.json"})


def _host_name(host: str) -> str:
    """The name of a Host header, without its port and as DNS compares it ('[::1]:8080' ->
    '::1', 'LOCALHOST.:80' -> 'localhost')."""
    if host.startswith("["):
        return host[1:].partition("]")[0]
    name = host.rpartition(":")[0] if host.count(":") == 1 else host
    return name.lower().rstrip(".")

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]

#: Refusals that pass by themselves (memory full under noeviction, a replica during a failover):
#: answered like an outage, 503 with Retry-After, not as a server bug.
_TRANSIENT_REFUSALS: Final = (redis.exceptions.OutOfMemoryError, redis.exceptions.ReadOnlyError)
#: An integer query parameter: ASCII digits, few enough for int() (which refuses over 4,300).
_DECIMAL: Final = re.compile(r"-?[0-9]{1,18}")


def _transient_refusal(exc: BaseException) -> bool:
    """True for a transient refusal, raw (plain commands) or as the script runner reports it."""
    return isinstance(exc, (*_TRANSIENT_REFUSALS, errors.RedisRefused))


@dataclass(frozen=True, slots=True)
class ApiSettings:
    queues: tuple[str, ...]
    """The queues this API serves (``antre api`` serves its ``--queue``); any other is a 403.
    /metrics reports their depth."""
    token: str | None = None
    """Bearer token required on /v1/; None only together with ``anonymous``."""
    anonymous: bool = False
    """Serve /v1/ without a token: an explicit choice, never the result of an empty token."""
    local_hosts_only: bool = False
    """Answer only requests addressed to this machine by a loopback name (``Host`` localhost or
    a loopback address, :mod:`antre.loopback`): what an API without a token listening on
    loopback needs, since a web page whose DNS name rebinds to a loopback address reaches it
    from the user's browser otherwise."""
    listen_name: str = ""
    """With ``local_hosts_only``, the host name the API was told to listen on (a name that
    resolves only to loopback, as a Debian machine's own name does): requests addressed to it
    are answered too. A rebinding page addresses its own name, never this one."""
    metrics_auth: bool = False
    """Require the token on /metrics too (give Prometheus the token); else /metrics is open."""
    port: int = setting(
        DEFAULT_PORT, env="ANTRE_API_PORT", flag="--port", minimum=0, maximum=65535,
        help="listen port")
    max_body_bytes: int = setting(
        DEFAULT_MAX_BODY_BYTES, env="ANTRE_API_MAX_BODY_BYTES", flag="--max-body-bytes",
        minimum=1, maximum=limits.MAX_BYTES, help="largest request body in bytes; bigger bodies get 413")
    body_timeout_s: float = setting(
        DEFAULT_BODY_TIMEOUT_S, env="ANTRE_API_BODY_TIMEOUT", flag="--body-timeout", minimum=0,
        exclusive_minimum=True, maximum=limits.MAX_WAIT_S,
        help="seconds to receive a request body once its headers are in; a slower one gets 408 "
             "and the connection is closed")
    max_connections: int = setting(
        DEFAULT_MAX_CONNECTIONS, env="ANTRE_API_MAX_CONNECTIONS", flag="--max-connections",
        minimum=1, maximum=limits.MAX_CONNECTIONS,
        help="connections open at once; one more is answered 503 and closed")
    retry_after_s: int = RETRY_AFTER_S
    """Value of Retry-After on 503 answers, in seconds."""

    def __post_init__(self) -> None:
        if not self.queues:
            raise errors.InvalidArgument("queues: empty; the API serves at least one queue")
        for queue in self.queues:
            keys.validate_queue_name(queue)
        if self.token is not None and not self.token.strip():
            raise errors.InvalidArgument(
                "token: set but empty; an empty token would turn authentication off. Set "
                "ANTRE_API_TOKEN to a secret, or choose --no-auth explicitly")
        if self.token is None and not self.anonymous:
            raise errors.InvalidArgument(
                "token: missing; set ANTRE_API_TOKEN, or choose --no-auth to serve /v1/ "
                "without authentication")
        if self.token is not None and self.anonymous:
            raise errors.InvalidArgument("token: given together with --no-auth; choose one")
        if self.metrics_auth and self.token is None:
            raise errors.InvalidArgument("--metrics-auth: needs a token (ANTRE_API_TOKEN)")
        fields.check(self)


class BadRequest(Exception):
    """A client error to answer with ``status`` and a JSON error body."""

    def __init__(self, status: int, code: str, message: str, *, field: str | None = None,
                 headers: dict[str, str] | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.code = code
        self.message = message
        self.field = field
        self.headers = headers or {}


def _error_response(status: int, code: str, message: str, *, field: str | None = None,
                    headers: dict[str, str] | None = None) -> web.Response:
    body: dict[str, Any] = {"error": code, "message": message}
    if field is not None:
        body["field"] = field
    return web.json_response(body, status=status, headers=headers)


# -- application state ---------------------------------------------------------------------------

class ApiState:
    """What the handlers share: one Redis client, the queue template, settings and metrics."""

    def __init__(self, redis_client: Any, queue_template: settings.QueueSettings,
                 api_settings: ApiSettings) -> None:
        self.redis = redis_client
        self.queue_template = queue_template
        self.settings = api_settings
        #: One client per served queue, so concurrent requests' enqueues share script calls
        #: (antre.enqueue_batcher) and the queue is registered once, not per request.
        self._queues: dict[str, AsyncQueue] = {}
        self.registry = CollectorRegistry()
        self.requests = Counter("antre_api_requests_total", "HTTP requests by route and status",
                                ["method", "route", "status"], registry=self.registry)
        self.request_seconds = Histogram(
            "antre_api_request_duration_seconds", "HTTP request handling time", ["route"],
            buckets=(0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5),
            registry=self.registry)
        self.enqueued = Counter("antre_api_enqueued_total", "Enqueue requests by result "
                                "(created, existing)", ["queue", "result"], registry=self.registry)
        self.depth = DepthCollector()
        self.registry.register(self.depth)

    def queue(self, name: str) -> AsyncQueue:
        try:
            keys.validate_queue_name(name)
        except errors.InvalidArgument as exc:
            raise BadRequest(400, "invalid_argument", str(exc), field="queue") from None
        if name not in self.settings.queues:
            raise BadRequest(403, "queue_not_served", f"queue {name!r}: not served by this API "
                             f"(it serves {', '.join(map(repr, self.settings.queues))})",
                             field="queue")
        queue = self._queues.get(name)
        if queue is None:
            queue = AsyncQueue(self.redis, settings=dataclasses.replace(self.queue_template, name=name))
            self._queues[name] = queue
        return queue


APP_STATE: Final = web.AppKey("antre_state", ApiState)
OPENAPI_DOC: Final = web.AppKey("antre_openapi", dict)


def _state(request: web.Request) -> ApiState:
    return request.app[APP_STATE]


# -- middlewares ---------------------------------------------------------------------------------

def _route_name(request: web.Request) -> str:
    resource = request.match_info.route.resource
    return resource.canonical if resource is not None else "unmatched"


async def _counted_route(request: web.Request) -> str:
    """The route label of a request's metrics: its route, also for a method the route does
    not serve (405: aiohttp then matched no route); "unmatched" for a path the API does not
    serve. Only routes of the API are ever named, so a client cannot add series."""
    if isinstance(request.match_info.http_exception, web.HTTPMethodNotAllowed):
        for resource in request.app.router.resources():
            _, allowed = await resource.resolve(request)
            if allowed:
                return resource.canonical
    return _route_name(request)


@web.middleware
async def error_middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
    state = _state(request)
    started = time.perf_counter()
    response: web.StreamResponse
    try:
        response = await handler(request)
    except BadRequest as exc:
        response = _error_response(exc.status, exc.code, exc.message, field=exc.field,
                                   headers=exc.headers)
    except web.HTTPException as exc:  # aiohttp's own: unknown path, wrong method, body too big
        if exc.status == 413:
            response = _error_response(413, "body_too_large", f"request body: must be at most "
                                       f"{state.settings.max_body_bytes} bytes")
        else:
            code = {404: "not_found", 405: "method_not_allowed"}.get(exc.status, "http_error")
            response = _error_response(exc.status, code, exc.reason,
                                       headers={k: v for k, v in exc.headers.items()
                                                if k.lower() == "allow"})
    except errors.NotReplicated as exc:
        # Written on the primary, not confirmed by enough replicas (durable_replicas): the
        # message names the jobs; a retry with the same idempotency key is safe.
        log.warning("write not confirmed by the replicas", extra={"path": request.path,
                                                                   "error": str(exc)})
        response = _error_response(503, "not_replicated", str(exc),
                                   headers={"Retry-After": str(state.settings.retry_after_s)})
    except (errors.RedisUnavailable, redis.ConnectionError, redis.TimeoutError) as exc:
        log.warning("redis unavailable", extra={"path": request.path, "error": str(exc)})
        response = _error_response(503, "redis_unavailable",
                                   "Redis is unavailable; retry later",
                                   headers={"Retry-After": str(state.settings.retry_after_s)})
    except Exception as exc:
        if _transient_refusal(exc):
            log.warning("redis refused the command", extra={"path": request.path,
                                                            "error": str(exc)})
            response = _error_response(503, "redis_unavailable",
                                       "Redis refused the command (out of memory or read-only); "
                                       "retry later",
                                       headers={"Retry-After": str(state.settings.retry_after_s)})
        else:
            request_id = secrets.token_hex(8)
            log.exception("unhandled error", extra={"path": request.path,
                                                    "method": request.method,
                                                    "request_id": request_id})
            response = _error_response(500, "internal", f"internal error (request id "
                                       f"{request_id}; details are in the server log)")
    route = await _counted_route(request)
    method = request.method if request.method in _COUNTED_METHODS else "other"
    state.requests.labels(method, route, str(response.status)).inc()
    state.request_seconds.labels(route).observe(time.perf_counter() - started)
    return response


#: Methods named in antre_api_requests_total; any other (a client chooses it: WebDAV's dozen,
#: or anything at all under aiohttp's pure-Python parser) counts as "other", so no client can
#: grow the number of series.
_COUNTED_METHODS: Final = frozenset({"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"})

_CHALLENGE: Final = {"WWW-Authenticate": 'Bearer realm="antre"'}


@web.middleware
async def auth_middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
    api_settings = _state(request).settings
    host_name = _host_name(request.host)
    if api_settings.local_hosts_only and not (loopback.names_loopback(host_name) or (
            api_settings.listen_name and host_name == api_settings.listen_name)):
        raise BadRequest(403, "host_not_allowed",
                         "Host: this API serves without a token, so only requests addressed to "
                         "localhost or a loopback address (127.0.0.0/8, [::1]; with any port)")
    # /v1/ is guarded (and /metrics when asked); probes and the document stay open, and an
    # unknown path is a 404 with or without a token.
    guarded = request.path.startswith("/v1/") or (
        api_settings.metrics_auth and request.path == "/metrics")
    if api_settings.token is None or not guarded or request.path in OPEN_PATHS:
        return await handler(request)
    header = request.headers.get("Authorization", "")
    scheme, _, given = header.partition(" ")
    if not header:
        raise BadRequest(401, "unauthorized", "Authorization: missing; send 'Bearer <token>'",
                         headers=_CHALLENGE)
    # Nothing of the header is echoed: a client that sent its token without the scheme would
    # find it in logs and error reports downstream.
    if scheme.lower() != "bearer":
        raise BadRequest(401, "unauthorized",
                         "Authorization: not a bearer token; send 'Bearer <token>'",
                         headers=_CHALLENGE)
    # compare_digest on bytes: constant time whatever the two lengths share. The bytes as the
    # client sent them: a header that is not UTF-8 arrives with surrogate escapes, which a
    # plain encode() refuses (a 500 for any client, with a traceback logged).
    if not hmac.compare_digest(given.strip().encode("utf-8", "surrogateescape"),
                               api_settings.token.encode()):
        raise BadRequest(401, "unauthorized", "Authorization: bearer token is wrong",
                         headers={"WWW-Authenticate":
                                  'Bearer realm="antre", error="invalid_token"'})
    return await handler(request)


@web.middleware
async def query_middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
    """Refuse query parameters the OpenAPI document does not list for the operation, so a
    typo such as ``?lmit=20`` is a 400 naming it rather than a silent default. Requests that
    match no documented operation (unknown path, wrong method) pass on to their 404 or 405."""
    operation = (request.app[OPENAPI_DOC]["paths"].get(_route_name(request), {})
                 .get(request.method.lower()))
    if operation is None:
        return await handler(request)
    allowed = sorted(param["name"] for param in operation.get("parameters", ())
                     if param["in"] == "query")
    unknown = sorted(set(request.query) - set(allowed))
    if unknown:
        raise BadRequest(400, "invalid_argument",
                         f"query parameter {', '.join(map(repr, unknown))}: unknown; allowed: "
                         f"{', '.join(allowed) or 'none'}", field=unknown[0])
    return await handler(request)


# -- request parsing -----------------------------------------------------------------------------

def _reject_constant(name: str) -> None:
    raise ValueError(f"{name} is not valid JSON")


async def read_json_object(request: web.Request) -> dict[str, Any]:
    """The body as a JSON object, or a BadRequest with 415, 413 or 400."""
    content_type = request.headers.get("Content-Type", "")
    media = content_type.split(";", 1)[0].strip().lower()
    if media != openapi.JSON and not (media.startswith("application/") and media.endswith("+json")):
        raise BadRequest(415, "unsupported_media_type",
                         f"Content-Type: got {content_type or 'none'!r}; must be application/json")
    limit = _state(request).settings.max_body_bytes
    if request.content_length is not None and request.content_length > limit:
        raise BadRequest(413, "body_too_large",
                         f"request body: {request.content_length} bytes; must be at most {limit}")
    timeout_s = _state(request).settings.body_timeout_s
    try:
        # client_max_size == limit: a chunked body over it raises 413.
        raw = await asyncio.wait_for(request.read(), timeout_s)
    except TimeoutError:
        raise BadRequest(408, "body_timeout", f"request body: not received within {timeout_s:g} "
                         "seconds", headers={"Connection": "close"}) from None
    except ConnectionResetError:
        # The client went away mid-body: nobody reads an answer, and it is no server error.
        # Counted under nginx's 499 ("client closed request"), not logged as a 500.
        raise BadRequest(499, "client_closed_request", "request body: the client closed the "
                         "connection before sending it all") from None
    try:
        body = json.loads(raw, parse_constant=_reject_constant)
    except (ValueError, UnicodeDecodeError) as exc:
        raise BadRequest(400, "invalid_json", f"body: not valid JSON ({exc})",
                         field="body") from None
    except RecursionError:  # a few hundred KiB of '[' nest deeper than the parser recurses
        raise BadRequest(400, "invalid_json", "body: JSON nested too deeply",
                         field="body") from None
    if not isinstance(body, dict):
        raise BadRequest(400, "invalid_argument",
                         f"body: got a JSON {type(body).__name__}; must be a JSON object",
                         field="body")
    return body


def _invalid(field: str, value: Any, allowed: str) -> BadRequest:
    return BadRequest(400, "invalid_argument", f"{field}: got {fields.shown(value)} "
                      f"({fields.type_name(value)}); must be {allowed}", field=field)


def _check_fields(body: dict[str, Any], allowed: tuple[str, ...]) -> None:
    for name in body:
        if name not in allowed:
            raise BadRequest(400, "invalid_argument", f"{name}: unknown field; allowed: "
                             f"{', '.join(allowed)}", field=name)


def _int(value: Any, name: str, *, minimum: int, maximum: int) -> int:
    if isinstance(value, float) and value.is_integer():
        value = int(value)  # JSON Schema: 3.0 is an integer
    if isinstance(value, bool) or not isinstance(value, int) or not minimum <= value <= maximum:
        raise _invalid(name, value, f"an integer from {minimum} to {maximum}")
    return value


def _text(value: Any, name: str, *, max_len: int) -> str:
    if not isinstance(value, str) or not 1 <= len(value) <= max_len:
        raise _invalid(name, value, f"a string of 1 to {max_len} characters")
    try:
        value.encode()
    except UnicodeEncodeError:  # a lone surrogate escape: valid JSON, not valid text for Redis
        raise _invalid(name, value, "valid Unicode text (no unpaired surrogates)") from None
    return value


# -- handlers ------------------------------------------------------------------------------------

async def enqueue(request: web.Request) -> web.Response:
    state = _state(request)
    queue = state.queue(request.match_info["queue"])
    try:
        job = fields.parse_object(openapi.EnqueueRequest, await read_json_object(request))
    except fields.BodyError as exc:
        raise BadRequest(400, "invalid_argument", str(exc), field=exc.field) from None
    with tracing.span("antre.enqueue", {"antre.queue": queue.name, "antre.job.type": job.type}):
        try:
            result = await queue.enqueue(
                job.type, job.payload, idempotency_key=job.idempotency_key,
                resource_key=job.resource_key, max_attempts=job.max_attempts, delay=job.delay_seconds or 0,
                headers=tracing.inject() or None)
        except errors.PayloadTooLarge as exc:
            raise BadRequest(413, "payload_too_large", str(exc), field="payload") from None
        except errors.IdempotencyConflict as exc:
            raise BadRequest(409, "idempotency_conflict", str(exc),
                             field="idempotency_key") from None
        except RecursionError:  # parsed, but too deep to encode again at this stack depth
            raise BadRequest(400, "invalid_argument", "payload: nested too deeply",
                             field="payload") from None
        except errors.InvalidArgument as exc:
            field = str(exc).split(":", 1)[0]
            raise BadRequest(400, "invalid_argument", str(exc), field=field) from None
    location = f"/v1/queues/{queue.name}/jobs/{result.job_id}"
    if result.created:
        state.enqueued.labels(queue.name, "created").inc()
        # The protocol counts whole milliseconds: a shorter delay enqueues the job as ready.
        status = "scheduled" if int((job.delay_seconds or 0) * 1000) > 0 else "queued"
        return web.json_response({"job_id": result.job_id, "status": status, "created": True},
                                 status=202, headers={"Location": location})
    state.enqueued.labels(queue.name, "existing").inc()
    try:
        existing: dict[str, Any] | None = (await queue.get(result.job_id)).to_dict()
    except errors.JobNotFound:  # settled and expired between the two calls
        existing = None
    return web.json_response({"job_id": result.job_id, "created": False, "job": existing,
                              "status": existing["status"] if existing else "unknown"},
                             status=200, headers={"Location": location})


async def get_job(request: web.Request) -> web.Response:
    queue = _state(request).queue(request.match_info["queue"])
    job_id = request.match_info["job_id"]
    not_found = BadRequest(404, "not_found", f"job {job_id!r}: no such job in queue "
                           f"{queue.name!r} (never existed, or its record expired)")
    if not scripts.is_job_id(job_id) or not job_id.replace("-", "").replace("_", "").replace(
            ".", "").isalnum():
        raise not_found
    try:
        info = await queue.get(job_id)
    except errors.JobNotFound:
        raise not_found from None
    return web.json_response(info.to_dict())


def stats_dict(queue: str, depth: Depth) -> dict[str, Any]:
    return {"queue": queue, "ready": depth.ready, "processing": depth.processing,
            "expired_leases": depth.expired_leases, "scheduled": depth.scheduled,
            "due": depth.due, "dead": depth.dead, "workers": depth.workers,
            "backlog": depth.backlog, "oldest_ready_age_s": depth.oldest_ready_age_s,
            "counters": depth.counters}


async def get_stats(request: web.Request) -> web.Response:
    queue = _state(request).queue(request.match_info["queue"])
    return web.json_response(stats_dict(queue.name, await queue.stats()))


def _query_int(request: web.Request, name: str, default: int, *, minimum: int,
               maximum: int) -> int:
    given = request.query.getall(name, [])
    if not given:
        return default
    if len(given) > 1:
        raise BadRequest(400, "invalid_argument", f"{name}: given {len(given)} times; give it "
                         "once", field=name)
    raw = given[0]
    # ASCII digits only: int() would also take '1_0', ' 1' and other scripts' digits.
    if not _DECIMAL.fullmatch(raw):
        raise BadRequest(400, "invalid_argument", f"{name}: got {raw!r:.100}; must be an integer "
                         f"from {minimum} to {maximum}", field=name)
    value = int(raw)
    if not minimum <= value <= maximum:
        raise BadRequest(400, "invalid_argument", f"{name}: got {value}; must be an integer from "
                         f"{minimum} to {maximum}", field=name)
    return value


async def list_dead(request: web.Request) -> web.Response:
    queue = _state(request).queue(request.match_info["queue"])
    limit = _query_int(request, "limit", 100, minimum=1, maximum=openapi.MAX_LIST_LIMIT)
    offset = _query_int(request, "offset", 0, minimum=0, maximum=openapi.MAX_OFFSET)
    jobs = await queue.dead_letters(limit=limit, offset=offset)
    total = await queue.dead_count()
    return web.json_response({"jobs": [job.to_dict() for job in jobs], "total": int(total),
                              "limit": limit, "offset": offset})


async def replay_dead(request: web.Request) -> web.Response:
    queue = _state(request).queue(request.match_info["queue"])
    body = await read_json_object(request)
    _check_fields(body, ("ids", "all", "limit"))
    limit = _int(body.get("limit", 1000), "limit", minimum=1, maximum=openapi.MAX_REPLAY_LIMIT)
    if "ids" in body and "all" in body:
        raise BadRequest(400, "invalid_argument", "ids: give either ids or all=true, not both",
                         field="ids")
    if "all" in body:
        if body["all"] is not True:
            raise _invalid("all", body["all"], "true (to replay the `limit` oldest dead jobs)")
        replayed = await queue.replay(limit=limit)
    elif "ids" in body:
        ids = body["ids"]
        if not isinstance(ids, list) or not 1 <= len(ids) <= openapi.MAX_REPLAY_IDS:
            raise _invalid("ids", ids, f"a list of 1 to {openapi.MAX_REPLAY_IDS} job id strings")
        ids = [_text(job_id, "ids", max_len=128) for job_id in ids]
        # An id no job can have is not in the dead letters: skipped, as an unknown id is.
        possible = [job_id for job_id in ids if scripts.is_job_id(job_id)]
        replayed = await queue.replay(possible, limit=max(limit, len(ids))) if possible else []
    else:
        raise BadRequest(400, "invalid_argument", "ids: missing; give a list of job ids, or "
                         "all=true to replay the `limit` oldest dead jobs", field="ids")
    return web.json_response({"replayed": replayed, "count": len(replayed)})


async def healthz(request: web.Request) -> web.Response:
    return web.json_response({"status": "ok"})


async def readyz(request: web.Request) -> web.Response:
    state = _state(request)
    await state.redis.ping()  # a failure becomes 503 in the error middleware
    return web.json_response({"status": "ready"})


async def metrics(request: web.Request) -> web.Response:
    state = _state(request)
    await state.depth.refresh([state.queue(name) for name in state.settings.queues])
    body = generate_latest(state.registry)
    return web.Response(body=body, headers={"Content-Type": CONTENT_TYPE_LATEST})


async def openapi_document(request: web.Request) -> web.Response:
    return web.json_response(request.app[OPENAPI_DOC])


def create_app(redis_client: Any, *, api_settings: ApiSettings,
               queue_template: settings.QueueSettings | None = None,
               dashboard: DashboardSettings | None = None) -> web.Application:
    """The application. ``queue_template`` gives prefix and limits for every queue (its name
    is replaced by the one in the path). With ``dashboard``, the web dashboard is served under
    ``/ui`` (:mod:`antre.dashboard`), for the same queues and with the same token. A durable
    ``queue_template`` on a Redis Cluster client is refused here, before anything is served."""
    scripts.check_durable_client(redis_client, queue_template or settings.QueueSettings())
    app = web.Application(middlewares=[error_middleware, auth_middleware, query_middleware],
                          client_max_size=api_settings.max_body_bytes)
    app[APP_STATE] = ApiState(redis_client, queue_template or settings.QueueSettings(),
                              api_settings)
    app[OPENAPI_DOC] = openapi.document(version=__version__)
    app.router.add_post("/v1/queues/{queue:[^/]+}/jobs", enqueue)
    app.router.add_get("/v1/queues/{queue:[^/]+}/jobs/{job_id:[^/]+}", get_job)
    app.router.add_get("/v1/queues/{queue:[^/]+}/stats", get_stats)
    app.router.add_get("/v1/queues/{queue:[^/]+}/dead", list_dead)
    app.router.add_post("/v1/queues/{queue:[^/]+}/dead/replay", replay_dead)
    app.router.add_get("/healthz", healthz)
    app.router.add_get("/readyz", readyz)
    app.router.add_get("/metrics", metrics)
    app.router.add_get("/openapi.json", openapi_document)
    if dashboard is not None:
        dashboard_app.mount_on(app, redis_client, queue_template=app[APP_STATE].queue_template,
                               dashboard_settings=dashboard, token=api_settings.token,
                               queues=api_settings.queues)
    return app


# -- serving -------------------------------------------------------------------------------------

_REFUSAL_BODY: Final = json.dumps({"error": "too_many_connections",
                                   "message": "the API has too many open connections; retry "
                                              "later"}).encode()


class _Refusal(asyncio.Protocol):
    """Answers a connection over the limit with a 503, without parsing anything. It then
    half-closes and drops what the client sends until the client closes (or 5 s pass): closing
    at once with the request unread would reset the connection before the answer is read."""

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        transport.write(b"HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json\r\n"
                        b"Retry-After: %d\r\nConnection: close\r\nContent-Length: %d\r\n\r\n%s"
                        % (RETRY_AFTER_S, len(_REFUSAL_BODY), _REFUSAL_BODY))
        transport.write_eof()
        asyncio.get_running_loop().call_later(5, transport.close)

    def data_received(self, data: bytes) -> None:
        pass

    def eof_received(self) -> bool:
        return False  # the transport closes itself


@dataclass
class RunningApi:
    runner: web.AppRunner
    server: asyncio.Server

    @property
    def addresses(self) -> list[tuple[str, int]]:
        return [sock.getsockname()[:2] for sock in self.server.sockets]

    async def close(self) -> None:
        """Stops accepting, lets requests in flight finish, closes Redis via app cleanup."""
        self.server.close()
        await self.runner.cleanup()


async def start(app: web.Application, *, host: str, port: int) -> RunningApi:
    """Serves ``app`` on ``host:port`` with at most ``max_connections`` connections open; an
    OSError (port taken, address unknown) propagates."""
    limit = app[APP_STATE].settings.max_connections
    # After an answer sent before its body was read (408, 413), aiohttp drains what is left of
    # the body before closing ("lingering", 10 s by default): a stalled client would keep its
    # connection that long again. One second still lets a fast client read the answer.
    runner = web.AppRunner(app, access_log=None, lingering_time=LINGERING_S)
    await runner.setup()
    handlers = runner.server
    assert handlers is not None

    def protocol() -> asyncio.Protocol:
        return _Refusal() if len(handlers.connections) >= limit else handlers()

    try:
        server = await asyncio.get_running_loop().create_server(protocol, host, port,
                                                                reuse_address=True)
    except BaseException:
        await runner.cleanup()
        raise
    return RunningApi(runner=runner, server=server)
