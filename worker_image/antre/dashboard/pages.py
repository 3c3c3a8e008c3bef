"""The dashboard's pages and live streams (GET only; changes are in :mod:`.actions`).

- ``/``: every queue in scope with its depth, throughput and backlog charts, workers and the
  age of the oldest waiting job;
- ``/queues/{queue}``: one queue: numbers and charts, the doctor's findings, its workers and
  resource locks, and a window of its jobs in one state (``?state=ready|processing|scheduled|
  dead&page=N``), plus search by job id or idempotency key;
- ``/queues/{queue}/jobs/{id}``: one job: attributes, payload, lifecycle, checkpoints and the
  actions its state allows; ``/record.json`` beside it is the record as the API returns it;
- ``/queues/{queue}/dead``: dead letters grouped by error, with group and selection actions;
- ``/live/overview``, ``/live/queues/{queue}``, ``/live/dead/{queue}``: server-sent events
  with the fragments that changed (see :mod:`.live`).
"""

from __future__ import annotations

import hashlib
import time
from typing import Any, Final
from urllib.parse import urlencode

from aiohttp import web

from antre.dashboard import live, reading, views
from antre.dashboard.access import page_context, safe_return, secure_headers
from antre.dashboard.state import Dashboard, PageError, dashboard_of, session_of
from antre.jobs import JobStatus

#: Dead-letter windows offered for grouping.
SCAN_CHOICES: Final = (500, 2000, 5000)

_WINDOW_HELP: Final = {
    reading.State.READY: "Head of the line first: #1 runs next.",
    reading.State.PROCESSING: "Leased to a worker; soonest lease end first.",
    reading.State.SCHEDULED: "Retries, delayed jobs and jobs waiting for a busy resource; "
                             "soonest due first.",
    reading.State.DEAD: "Newest first.",
}

#: What an action's redirect may tell the next page (code -> text with the numbers filled in).
NOTICES: Final = {
    "replayed": "Replayed {n} of {of} job(s): they are back in the ready list.",
    "purged": "Purged {n} of {of} job(s).",
    "cancelled": "Cancelled: the job was {was} and will not run.",
    "finished": "Nothing to cancel: the job had already {was}.",
    "busy": "Not cancelled: the job is processing (a running job cannot be withdrawn).",
    "gone": "The job no longer exists.",
    "notfound": "No job has that id or idempotency key in this queue.",
}


def notice_text(query: Any) -> str:
    """The notice an action redirected with; only numbers and known words are taken from the
    URL, so a crafted link cannot put text of its own on the page."""
    template = NOTICES.get(query.get("done", ""))
    if template is None:
        return ""

    def count(name: str) -> str:
        value = small_count(query.get(name, "0"), max_digits=9)
        return "?" if value is None else views.number(value)

    was = query.get("was", "")
    known = {str(status) for status in JobStatus}
    return template.format(n=count("n"), of=count("of"),
                           was=was if was in known else "withdrawn")


def group_key(last_error: str) -> str:
    """A short stable name for a dead-letter group in forms (errors can be kilobytes)."""
    return hashlib.sha256(last_error.encode()).hexdigest()[:20]


async def _page(dashboard: Dashboard, request: web.Request, template: str,
                **context: Any) -> web.Response:
    body = dashboard.render(template, queue_names=dashboard.queue_names(),
                            notice=notice_text(request.query), interval_s=dashboard.settings.live_interval_s,
                            **page_context(dashboard, request), **context)
    return web.Response(text=body, content_type="text/html")


def small_count(raw: object, *, max_digits: int) -> int | None:
    """``raw`` as a whole number if it is 1 to ``max_digits`` ASCII digits, else None. Not
    str.isdigit alone: '²' is a digit to it but not to int() (a ValueError: a 500)."""
    if isinstance(raw, str) and raw.isascii() and raw.isdigit() and len(raw) <= max_digits:
        return int(raw)
    return None


def _int_param(request: web.Request, name: str, default: int) -> int:
    value = small_count(request.query.get(name, ""), max_digits=9)
    return default if value is None else value


async def overview(request: web.Request) -> web.StreamResponse:
    dashboard = dashboard_of(request)
    await dashboard.read_depths(None)
    return await _page(dashboard, request, "overview.html", live=dashboard.url("/live/overview"),
                       summaries=[dashboard.summary(name) for name in dashboard.queue_names()],
                       other_queues=await dashboard.other_queues())


async def queue_page(request: web.Request) -> web.StreamResponse:
    dashboard = dashboard_of(request)
    queue = dashboard.queue(request.match_info["queue"])
    try:
        state = reading.State(request.query.get("state", "ready"))
    except ValueError:
        state = reading.State.READY
    snapshot = await dashboard.read_snapshot(queue.name,
                                             dashboard.monitor.readings.trend_base(queue.name))
    dashboard.monitor.readings.snapshots[queue.name] = snapshot
    dashboard.monitor.readings.record(queue.name, snapshot.after)
    window = await reading.read_window(queue, state, page=_int_param(request, "page", 1),
                                       total=state.total(snapshot.after))
    base = dashboard.url(f"/queues/{queue.name}")
    return await _page(
        dashboard, request, "queue.html", queue=queue.name, live=dashboard.url(
            f"/live/queues/{queue.name}"),
        summary=dashboard.summary(queue.name), health=dashboard.health(queue.name),
        states=list(reading.State), window=window, window_help=_WINDOW_HELP[state],
        now_ms=snapshot.after.now_ms, selectable=None,
        page_url=f"{base}?{urlencode({'state': str(state)})}&", page_action=base,
        page_hidden=[("state", str(state))], search=request.query.get("q"))


async def dead_page(request: web.Request) -> web.StreamResponse:
    dashboard = dashboard_of(request)
    queue = dashboard.queue(request.match_info["queue"])
    depth = (await dashboard.read_depths([queue.name])).get(queue.name)
    if depth is None:
        raise PageError(503, "Redis is unavailable", dashboard.monitor.readings.errors.get(
            queue.name, "The queue could not be read."), back=dashboard.url("/"))
    scan = await reading.read_dead_groups(
        queue, depth, scan=_int_param(request, "scan", reading.DEFAULT_GROUP_SCAN),
        known_dead=dashboard.page_dead[queue.name])
    window = await reading.read_window(queue, reading.State.DEAD,
                                       page=_int_param(request, "page", 1), total=depth.dead)
    base = dashboard.url(f"/queues/{queue.name}/dead")
    query = {"scan": str(scan.scanned)} if scan.scanned > reading.DEFAULT_GROUP_SCAN else {}
    return await _page(
        dashboard, request, "dead.html", queue=queue.name,
        live=dashboard.url(f"/live/dead/{queue.name}"), summary=dashboard.summary(queue.name),
        scan=scan, scan_choices=SCAN_CHOICES,
        group_keys={g.last_error: group_key(g.last_error) for g in scan.groups},
        burst_window=views.age(dashboard.thresholds.burst_window_s), window=window,
        now_ms=depth.now_ms, selectable="selected",
        back=request.path_qs, page_url=f"{base}?{urlencode(query)}{'&' if query else ''}",
        page_action=base, page_hidden=list(query.items()))


async def job_page(request: web.Request) -> web.StreamResponse:
    dashboard = dashboard_of(request)
    queue = dashboard.queue(request.match_info["queue"])
    job = await reading.read_job(queue, request.match_info["job_id"])
    if job is None:
        raise PageError(404, "No such job", "No record with that id in this queue: it never "
                        "existed, or it finished and its record expired.",
                        back=dashboard.url(f"/queues/{queue.name}"))
    return await _page(dashboard, request, "job.html",
                       live=dashboard.url(f"/live/jobs/{queue.name}/{job.job_id}"),
                       **dashboard.job_context(queue.name, job.job_id, job))


async def job_record(request: web.Request) -> web.StreamResponse:
    dashboard = dashboard_of(request)
    queue = dashboard.queue(request.match_info["queue"])
    job = await reading.read_job(queue, request.match_info["job_id"])
    if job is None:
        raise PageError(404, "No such job", "No record with that id in this queue.")
    body: dict[str, Any] = job.info.to_dict() if job.info is not None else {
        "id": job.job_id, "unreadable": job.unreadable, "fields": job.attributes}
    return web.json_response(body, dumps=_pretty_json)


def _pretty_json(value: Any) -> str:
    import json

    return views.sendable(json.dumps(value, indent=2, ensure_ascii=False))


async def search(request: web.Request) -> web.StreamResponse:
    dashboard = dashboard_of(request)
    queue = dashboard.queue(request.match_info["queue"])
    job_id = await reading.find_job(queue, request.query.get("q", "")[:512])
    if job_id is None:
        raise web.HTTPSeeOther(dashboard.url(f"/queues/{queue.name}?done=notfound"))
    raise web.HTTPSeeOther(dashboard.url(f"/queues/{queue.name}/jobs/{job_id}"))


# -- live streams ----------------------------------------------------------------------------------

async def _stream(request: web.Request, topic: str) -> web.StreamResponse:
    dashboard = dashboard_of(request)
    monitor = dashboard.monitor
    if monitor.full:
        raise PageError(503, "Too many live pages", "This server already streams to its limit "
                        "of open tabs; reload the page later.")
    # Subscribed before the first await: tabs opening at once must not all pass the check.
    subscription = monitor.subscribe(topic)
    response = web.StreamResponse(headers={"Content-Type": "text/event-stream",
                                           "Cache-Control": "no-store",
                                           "X-Accel-Buffering": "no"})
    secure_headers(response)
    # The stream ends with its session: an open tab must not outlive the sign-in (its
    # reconnect then needs a session like any page).
    session = session_of(request)
    ends_at_s = session.expires_at_s if session is not None else time.time()
    try:
        await response.prepare(request)
        await response.write(b"retry: 3000\n\n")
        while (left_s := ends_at_s - time.time()) > 0:
            chunks = await live.frames(subscription,
                                       keepalive_s=min(live.KEEPALIVE_S, left_s))
            if chunks is None or time.time() >= ends_at_s:
                break
            for chunk in chunks:
                await response.write(chunk)
    except (ConnectionResetError, RuntimeError):  # the tab went away mid-write
        pass
    finally:
        monitor.unsubscribe(subscription)
    return response


async def live_overview(request: web.Request) -> web.StreamResponse:
    return await _stream(request, "overview")


async def live_queue(request: web.Request) -> web.StreamResponse:
    name = dashboard_of(request).queue(request.match_info["queue"]).name
    return await _stream(request, f"queue:{name}")


async def live_job(request: web.Request) -> web.StreamResponse:
    name = dashboard_of(request).queue(request.match_info["queue"]).name
    job_id = request.match_info["job_id"]
    if not reading.valid_job_id(job_id):
        raise PageError(404, "No such job", "That is not a job id.")
    return await _stream(request, live.job_topic(name, job_id))


async def live_dead(request: web.Request) -> web.StreamResponse:
    name = dashboard_of(request).queue(request.match_info["queue"]).name
    return await _stream(request, f"dead:{name}")


def back_target(dashboard: Dashboard, value: Any, queue: str) -> str:
    return safe_return(dashboard, value if isinstance(value, str) else None,
                       dashboard.url(f"/queues/{queue}"))
