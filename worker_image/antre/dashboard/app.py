"""The dashboard as an aiohttp sub-application, mounted by ``antre api`` under ``/ui``.

Routes are listed here; the handlers live in :mod:`.pages` (GET), :mod:`.actions` (POST) and
:mod:`.access` (sign-in). Static files are read from the package once, at start, and served
from memory with a content hash in their URL, so they can be cached for a year.
"""

from __future__ import annotations

import mimetypes
from typing import Any

from aiohttp import web

from antre import settings
from antre.dashboard import access, actions, pages
from antre.dashboard.state import DASHBOARD, MOUNT, Dashboard, DashboardSettings, dashboard_of

_QUEUE = "/queues/{queue:[^/]+}"


async def static_file(request: web.Request) -> web.StreamResponse:
    dashboard = dashboard_of(request)
    name = request.match_info["name"]
    body = dashboard.static.get(name)
    if body is None:
        raise web.HTTPNotFound()
    content_type = mimetypes.guess_type(name)[0] or "application/octet-stream"
    return web.Response(body=body, content_type=content_type, charset="utf-8",
                        headers={"Cache-Control": "public, max-age=31536000, immutable",
                                 "X-Content-Type-Options": "nosniff"})


def create_app(redis_client: Any, *, queue_template: settings.QueueSettings,
               dashboard_settings: DashboardSettings, token: str | None, queues: tuple[str, ...],
               mount: str = MOUNT) -> web.Application:
    """The sub-application; add it with ``app.add_subapp(mount, ...)`` (see :func:`mount_on`)."""
    app = web.Application(middlewares=[access.access_middleware])
    dashboard = Dashboard(redis_client, queue_template, dashboard_settings, token=token,
                          queues=queues, mount=mount)
    app[DASHBOARD] = dashboard
    router = app.router
    router.add_get("/", pages.overview)
    router.add_get("/login", access.login_page)
    router.add_post("/login", access.login)
    router.add_post("/logout", access.logout)
    router.add_get(_QUEUE, pages.queue_page)
    router.add_get(_QUEUE + "/search", pages.search)
    router.add_get(_QUEUE + "/dead", pages.dead_page)
    router.add_get(_QUEUE + "/jobs/{job_id:[^/]+}", pages.job_page)
    router.add_get(_QUEUE + "/jobs/{job_id:[^/]+}/record.json", pages.job_record)
    router.add_post(_QUEUE + "/actions", actions.run_action)
    router.add_get("/live/overview", pages.live_overview)
    router.add_get("/live/queues/{queue:[^/]+}", pages.live_queue)
    router.add_get("/live/dead/{queue:[^/]+}", pages.live_dead)
    router.add_get("/live/jobs/{queue:[^/]+}/{job_id:[^/]+}", pages.live_job)
    router.add_get("/static/{name:[A-Za-z0-9._-]+}", static_file)

    async def stop_streams(_app: web.Application) -> None:
        await dashboard.monitor.close()

    app.on_shutdown.append(stop_streams)
    return app


def mount_on(parent: web.Application, redis_client: Any, *,
             queue_template: settings.QueueSettings, dashboard_settings: DashboardSettings,
             token: str | None, queues: tuple[str, ...]) -> web.Application:
    """Adds the dashboard under ``/ui`` (and a redirect from ``/ui`` to ``/ui/``)."""
    sub = create_app(redis_client, queue_template=queue_template,
                     dashboard_settings=dashboard_settings, token=token, queues=queues)

    async def to_slash(_request: web.Request) -> web.StreamResponse:
        return web.Response(status=308, headers={"Location": MOUNT + "/"})

    parent.router.add_get(MOUNT, to_slash)
    parent.add_subapp(MOUNT, sub)
    return sub
