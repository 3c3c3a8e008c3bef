"""What every dashboard handler shares: its settings, the Redis client, the queue scope, the
session signers, the shared live monitor and the template environment.

The scope and the token are the API's: the dashboard shows and acts on the queues ``antre api``
serves (``--queue``/``--queues``), and signs in with ``ANTRE_API_TOKEN``. A queue outside the
scope is a 404. The queue registry (:mod:`antre.queue_registry`, never a keyspace scan) tells
how many other queues live under the prefix, by count only.
"""

from __future__ import annotations

import asyncio
import dataclasses
import hashlib
from collections.abc import Iterable
from dataclasses import dataclass
from importlib import resources
from typing import Any, Final

import jinja2
from aiohttp import web

from antre import __version__, errors, fields, keys, queue_registry, settings, snapshots
from antre.client import AsyncQueue
from antre.dashboard import forwarded, live, reading, sessions, views
from antre.fields import setting
from antre.findings import Snapshot, Thresholds
from antre.jobs import JobStatus
from antre.protocol.depth import Depth

#: Where ``antre api`` mounts the dashboard.
MOUNT: Final = "/ui"


@dataclass(frozen=True, slots=True)
class DashboardSettings:
    """What only the dashboard has; the queues and the token come from the API's settings.
    Declared with :func:`antre.fields.setting`, so the flags, variables and docs table derive
    from here (``--dashboard`` and ``--dashboard-read-only`` are switches of ``antre api``)."""

    read_only: bool = False
    """Show everything, change nothing: no action buttons, and every action answers 403."""
    live_interval_s: float = setting(
        2.0, env="ANTRE_DASHBOARD_INTERVAL", flag="--dashboard-interval", minimum=0.2,
        maximum=60, help="seconds between live depth samples while a tab is open (one depth "
                         "script per queue shown)")
    detail_interval_s: float = setting(
        5.0, minimum=0.2, maximum=300,
        help="seconds between health reads (findings, workers, locks) of a queue whose page is "
             "open; at least the live interval")
    session_ttl_s: int = setting(
        12 * 3600, env="ANTRE_DASHBOARD_SESSION_TTL", flag="--dashboard-session-ttl", minimum=60,
        maximum=30 * 86_400, help="seconds a sign-in lasts")
    max_streams: int = setting(
        100, env="ANTRE_DASHBOARD_MAX_STREAMS", flag="--dashboard-max-streams", minimum=1,
        maximum=10_000, help="live tabs served at once per API process; more get 503")
    trusted_proxies: str = setting(
        "", env="ANTRE_DASHBOARD_TRUSTED_PROXIES", flag="--dashboard-trusted-proxies",
        validate=forwarded.proxy_networks,
        help="comma-separated addresses or CIDR ranges of the reverse proxies in front of the "
             "API (an Ingress controller's pods): the sign-in throttle then counts wrong tokens "
             "per client address from their X-Forwarded-For, instead of per proxy")

    def __post_init__(self) -> None:
        fields.check(self)


class PageError(Exception):
    """A page that cannot be shown: answered with ``status`` and a message page."""

    def __init__(self, status: int, heading: str, text: str, *, back: str | None = None) -> None:
        super().__init__(text)
        self.status = status
        self.heading = heading
        self.text = text
        self.back = back


def _static_files() -> dict[str, bytes]:
    folder = resources.files("antre.dashboard").joinpath("static")
    return {item.name: item.read_bytes() for item in folder.iterdir() if item.is_file()}


class Dashboard:
    """``token``: the API token the sign-in form takes; None when the API runs without
    authentication (``--no-auth``): no sign-in then, but actions still need the CSRF token.
    ``queues``: the queues shown and acted on."""

    def __init__(self, redis_client: Any, queue_template: settings.QueueSettings,
                 dashboard_settings: DashboardSettings, *, token: str | None,
                 queues: tuple[str, ...], mount: str = MOUNT) -> None:
        if token is not None and not token.strip():
            raise errors.InvalidArgument("token: set but empty; give the API token, or None to "
                                         "run without sign-in")
        if not queues:
            raise errors.InvalidArgument("queues: empty; the dashboard serves at least one queue")
        for queue in queues:
            keys.validate_queue_name(queue)
        self.redis = redis_client
        self.queue_template = queue_template
        self.settings = dashboard_settings
        self.token = token
        self.queues = queues
        self.mount = mount
        self.thresholds = Thresholds()
        #: Dead-letter details already read, per queue: for the health reads (the doctor's
        #: window) and for the dead-letter page's wider groupings.
        self.health_dead = {name: snapshots.DeadCache() for name in queues}
        self.page_dead = {name: snapshots.DeadCache() for name in queues}
        key = sessions.signing_key(token)
        self.signer = sessions.SessionSigner(key, ttl_s=dashboard_settings.session_ttl_s)
        # A pre-login cookie carries the login form's CSRF token; its own key, so it can never
        # pass for a session.
        self.login_signer = sessions.SessionSigner(
            hashlib.sha256(b"login form|" + key).digest(), ttl_s=3600)
        self.throttle = sessions.LoginThrottle()
        self.trusted_proxies = forwarded.proxy_networks(dashboard_settings.trusted_proxies)
        self.static = _static_files()
        self.static_version = hashlib.sha256(
            b"".join(self.static[name] for name in sorted(self.static))).hexdigest()[:12]
        self.templates = jinja2.Environment(
            loader=jinja2.PackageLoader("antre.dashboard", "templates"),
            autoescape=True, trim_blocks=True, lstrip_blocks=True,
            undefined=jinja2.ChainableUndefined)
        self.templates.filters.update(views.FILTERS)
        self.templates.globals.update(url=self.url, static=self.static_url, version=__version__,
                                      prefix=queue_template.prefix)
        self.monitor = live.Monitor(
            read_depths=self.read_depths, read_snapshot=self.read_snapshot,
            read_job=self.read_job, render=self.render_topic, interval_s=dashboard_settings.live_interval_s,
            detail_interval_s=max(dashboard_settings.detail_interval_s,
                                  dashboard_settings.live_interval_s),
            max_streams=dashboard_settings.max_streams)

    # -- urls and templates --------------------------------------------------------------------

    def url(self, path: str) -> str:
        return self.mount + path

    def static_url(self, name: str) -> str:
        return f"{self.mount}/static/{name}?v={self.static_version}"

    def render(self, template: str, **context: Any) -> str:
        return views.sendable(self.templates.get_template(template).render(**context))

    # -- scope and queues ----------------------------------------------------------------------

    def queue_names(self) -> list[str]:
        return list(self.queues)

    async def other_queues(self) -> int:
        """How many registered queues under the prefix this dashboard does not serve."""
        registered = await queue_registry.registered_queues(self.redis, self.queue_template.prefix)
        return len(set(registered) - set(self.queues))

    def queue(self, name: str) -> AsyncQueue:
        """The queue ``name`` if it is in scope; else a 404 (the same answer for a queue that
        does not exist, so the scope is not probed)."""
        try:
            keys.validate_queue_name(name)
        except errors.InvalidArgument:
            name = ""
        if not name or name not in self.queues:
            raise PageError(404, "No such queue", "This dashboard does not serve that queue.",
                            back=self.url("/"))
        return AsyncQueue(self.redis,
                          settings=dataclasses.replace(self.queue_template, name=name))

    # -- reads shared with the live monitor ------------------------------------------------------

    async def read_depths(self, names: Iterable[str] | None = None) -> dict[str, Depth]:
        """One depth script per queue, concurrently; records each sample for the charts. A queue
        that cannot be read is left out and its error noted."""
        wanted = list(names) if names is not None else self.queue_names()
        queues = [self.queue(name) for name in wanted]
        results = await asyncio.gather(*(queue.stats() for queue in queues),
                                       return_exceptions=True)
        depths = {}
        readings = self.monitor.readings
        for queue, result in zip(queues, results, strict=True):
            if isinstance(result, BaseException):
                if not isinstance(result, Exception):
                    raise result
                readings.errors[queue.name] = str(result) or type(result).__name__
                continue
            readings.errors.pop(queue.name, None)
            readings.record(queue.name, result)
            depths[queue.name] = result
        return depths

    async def read_snapshot(self, name: str, before: Depth | None = None) -> Snapshot:
        return await snapshots.read_snapshot_async(self.queue(name), thresholds=self.thresholds,
                                                   before=before, known_dead=self.health_dead[name])

    async def read_job(self, name: str, job_id: str) -> reading.JobDetail | None:
        return await reading.read_job(self.queue(name), job_id)

    def job_context(self, name: str, job_id: str,
                    job: reading.JobDetail | None) -> dict[str, Any]:
        """What the live part of a job's page shows (fragments/job.html), besides ``csrf`` and
        ``read_only``, which every page has."""
        return {"queue": name, "job_id": job_id, "job": job,
                "info": job.info if job is not None else None,
                "actions": [] if self.settings.read_only or job is None else job_actions(job),
                "back": self.url(f"/queues/{name}/jobs/{job_id}")}

    def summary(self, name: str) -> views.QueueSummary:
        readings = self.monitor.readings
        return views.summarize(name, list(readings.history.get(name, ())),
                               readings.errors.get(name, "") or readings.errors.get("", ""))

    def health(self, name: str) -> views.Health | None:
        snapshot = self.monitor.readings.snapshots.get(name)
        return views.health(snapshot, self.thresholds) if snapshot is not None else None

    def render_topic(self, readings: live.Readings, topic: str) -> dict[str, str]:
        """The live fragments of a topic (element id -> HTML), from the same templates as the
        pages include."""
        if topic == "overview":
            return {"queues": self.render("fragments/queues.html",
                                          summaries=[self.summary(n) for n in self.queues])}
        job = live.topic_job(topic)
        if job is not None:
            if topic in readings.errors:  # keep what the page shows; the footer says why
                return {}
            detail = readings.jobs.get(job)
            return {"job-live": self.render(
                "fragments/job.html", csrf="", read_only=self.settings.read_only,
                **self.job_context(*job, detail if isinstance(detail, reading.JobDetail)
                                   else None))}
        name = topic.split(":", 1)[1]
        fragments = {"depth": self.render("fragments/depth.html", summary=self.summary(name))}
        if topic.startswith("queue:"):
            fragments["health"] = self.render("fragments/health.html", queue=name,
                                              health=self.health(name),
                                              health_error=readings.errors.get(name))
        return fragments


def job_actions(job: reading.JobDetail) -> list[dict[str, str]]:
    """The actions that make sense in the job's state."""
    status = job.info.status if job.info is not None else job.attributes.get("status")
    actions = []
    if status == JobStatus.DEAD:
        actions.append({"action": "replay", "label": "Replay", "style": ""})
    if status in (JobStatus.QUEUED, JobStatus.SCHEDULED, JobStatus.RETRYING, JobStatus.DEAD):
        actions.append({"action": "cancel", "label": "Cancel", "style": "danger"})
    if status == JobStatus.DEAD:
        actions.append({"action": "purge", "label": "Delete", "style": "danger"})
    return actions


DASHBOARD: Final = web.AppKey("antre_dashboard", Dashboard)


def _request_key(name: str) -> Any:
    """A typed request key from aiohttp 3.14 on (which warns about a plain string); the name
    itself before, as those releases take it."""
    key_type = getattr(web, "RequestKey", None)
    return key_type(name) if key_type is not None else name


#: The request's verified session (None: not signed in), set by the access middleware; read
#: with :func:`session_of`.
SESSION: Final = _request_key("antre_session")


def session_of(request: web.Request) -> sessions.Session | None:
    session: sessions.Session | None = request.get(SESSION)
    return session


def dashboard_of(request: web.Request) -> Dashboard:
    return request.config_dict[DASHBOARD]
