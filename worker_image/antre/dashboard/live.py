"""Live updates: one shared sampler per server, fanned out to every open tab as server-sent events.

A tab never makes Redis work of its own. The :class:`Monitor` runs while at least one stream is
open: every ``interval_s`` it reads the depth of each queue in scope (one depth script each, the
numbers of ``antre stats`` and the API), and every ``detail_interval_s`` the snapshot of each
queue whose page is open somewhere (the reads of ``antre doctor``). It renders each topic's
fragments once and hands the same text to every subscriber of that topic, so ten tabs on one
queue cost Redis what one tab costs. With no stream open it stops, and the dashboard sends no
command at all.

An open job page adds its job's record to the reads (one read per tick for that job, however
many tabs show it).

The depth samples also feed the charts: the last :data:`HISTORY_POINTS` per queue stay in
memory (page loads add theirs too), so a page opened later shows the recent trend at once.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import time
from collections import deque
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Final

from antre.findings import Snapshot
from antre.protocol.depth import Depth

log = logging.getLogger("antre.dashboard")

#: Depth samples kept per queue for the charts (at 2 s: the last 10 minutes).
HISTORY_POINTS: Final = 300
#: A comment line sent when nothing changed for this long, so proxies keep the stream open.
KEEPALIVE_S: Final = 15.0

#: Renders a topic's fragments: element id -> HTML, from the shared readings.
Renderer = Callable[["Readings", str], dict[str, str]]


@dataclass
class Readings:
    """What the monitor read last, shared by every renderer."""

    depths: dict[str, Depth] = field(default_factory=dict)
    history: dict[str, deque[Depth]] = field(default_factory=dict)
    snapshots: dict[str, Snapshot] = field(default_factory=dict)
    #: The record of each job whose page is open, by ``(queue, job id)`` (None: no record).
    jobs: dict[tuple[str, str], object] = field(default_factory=dict)
    #: Errors of the last tick by queue ("" for all queues when the scope could not be read).
    errors: dict[str, str] = field(default_factory=dict)

    def trend_base(self, queue: str) -> Depth | None:
        """The sample a new health read compares with (its trend): the last health read's
        depth, else the newest depth sample. None only for a queue never read, when the reader
        takes a sample of its own."""
        snapshot = self.snapshots.get(queue)
        if snapshot is not None:
            return snapshot.after
        series = self.history.get(queue)
        return series[-1] if series else None

    def record(self, queue: str, depth: Depth) -> None:
        """Adds a sample unless it is older than the last one (two readers raced)."""
        series = self.history.setdefault(queue, deque(maxlen=HISTORY_POINTS))
        if not series or depth.now_ms > series[-1].now_ms:
            series.append(depth)
        self.depths[queue] = depth


@dataclass(eq=False)
class Subscription:
    topic: str
    #: The latest payload not yet sent; older unsent ones are replaced (a slow tab skips frames).
    pending: str | None = None
    wake: asyncio.Event = field(default_factory=asyncio.Event)
    closed: bool = False

    def offer(self, payload: str) -> None:
        self.pending = payload
        self.wake.set()

    def close(self) -> None:
        self.closed = True
        self.wake.set()


def job_topic(queue: str, job_id: str) -> str:
    return f"job:{queue}:{job_id}"


def depth_shown(topic: str) -> str | None:
    """The queue whose depth a queue's or its dead letters' page shows; None for the overview
    (it shows every queue) and for a job's page (it shows none)."""
    kind, _, rest = topic.partition(":")
    return rest if kind in ("queue", "dead") else None


def topic_job(topic: str) -> tuple[str, str] | None:
    """``(queue, job id)`` of a job topic, else None. Queue names have no colon."""
    kind, _, rest = topic.partition(":")
    queue, _, job_id = rest.partition(":")
    return (queue, job_id) if kind == "job" and job_id else None


class Monitor:
    """The shared sampler. ``read_depths``, ``read_snapshot`` and ``read_job`` do the Redis
    reads; ``render`` turns readings into a topic's fragments. Topics: ``overview`` (every
    queue's depth), ``queue:<name>`` (its depth and health), ``dead:<name>`` (its depth),
    ``job:<queue>:<id>`` (that job's record)."""

    def __init__(self, *, read_depths: Callable[[set[str] | None], Awaitable[dict[str, Depth]]],
                 read_snapshot: Callable[[str, Depth | None], Awaitable[Snapshot]],
                 read_job: Callable[[str, str], Awaitable[object]],
                 render: Renderer, interval_s: float, detail_interval_s: float,
                 max_streams: int) -> None:
        self.read_depths = read_depths
        self.read_snapshot = read_snapshot
        self.read_job = read_job
        self.render = render
        self.interval_s = interval_s
        self.detail_interval_s = detail_interval_s
        self.max_streams = max_streams
        self.readings = Readings()
        self.subscriptions: set[Subscription] = set()
        self._task: asyncio.Task[None] | None = None
        self._last_sent: dict[str, str] = {}
        self._detail_read_at: dict[str, float] = {}
        #: Ticks run since start (for the benchmark and the tests).
        self.ticks = 0

    # -- subscribers ---------------------------------------------------------------------------

    @property
    def full(self) -> bool:
        return len(self.subscriptions) >= self.max_streams

    def subscribe(self, topic: str) -> Subscription:
        subscription = Subscription(topic)
        self.subscriptions.add(subscription)
        cached = self._last_sent.get(topic)
        if cached is not None:  # the newest frame at once, not one interval later
            subscription.offer(cached)
        if self._task is None or self._task.done():
            self._task = asyncio.create_task(self._run(), name="antre-dashboard-monitor")
        return subscription

    def unsubscribe(self, subscription: Subscription) -> None:
        self.subscriptions.discard(subscription)

    async def close(self) -> None:
        """Ends every stream and the sampler (server shutdown)."""
        for subscription in list(self.subscriptions):
            subscription.close()
        self.subscriptions.clear()
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task

    # -- sampling ------------------------------------------------------------------------------

    def _topics(self) -> set[str]:
        return {subscription.topic for subscription in self.subscriptions}

    async def _run(self) -> None:
        while self.subscriptions:
            started = time.monotonic()
            try:
                await self.step()
            except Exception:  # one bad tick must not end live updates for every tab
                log.exception("dashboard live update failed")
            await asyncio.sleep(max(self.interval_s - (time.monotonic() - started), 0.05))
        self._last_sent.clear()  # nobody watched: the next stream starts from fresh readings

    async def step(self) -> None:
        """One tick: read what the open topics need, render each topic once, offer it."""
        self.ticks += 1
        topics = self._topics()
        # The overview needs every queue in scope; queue pages only their own.
        wanted = None if "overview" in topics else {
            queue for queue in map(depth_shown, topics) if queue is not None}
        try:
            for name, depth in (await self.read_depths(wanted)).items():
                self.readings.record(name, depth)
            self.readings.errors.pop("", None)
        except Exception as exc:
            self.readings.errors[""] = str(exc) or type(exc).__name__
        now = time.monotonic()
        for topic in sorted(topics):
            if not topic.startswith("queue:"):
                continue
            queue = topic.split(":", 1)[1]
            if now - self._detail_read_at.get(queue, -1e9) < self.detail_interval_s - 0.01:
                continue
            self._detail_read_at[queue] = now
            try:
                snapshot = await self.read_snapshot(queue, self.readings.trend_base(queue))
                self.readings.snapshots[queue] = snapshot
                self.readings.record(queue, snapshot.after)
                self.readings.errors.pop(queue, None)
            except Exception as exc:
                self.readings.errors[queue] = str(exc) or type(exc).__name__
        jobs = {job for job in map(topic_job, topics) if job is not None}
        for job in sorted(jobs):
            try:
                self.readings.jobs[job] = await self.read_job(*job)
                self.readings.errors.pop(job_topic(*job), None)
            except Exception as exc:
                self.readings.errors[job_topic(*job)] = str(exc) or type(exc).__name__
        for gone in set(self.readings.jobs) - jobs:  # no page open on it any more
            del self.readings.jobs[gone]
            self.readings.errors.pop(job_topic(*gone), None)
        # Nor the frames of pages closed since: a page opened again starts from this tick's
        # frame, not from what it showed when its last tab closed (a job since cancelled shown
        # queued), and the frames of every page ever opened do not pile up in memory.
        for gone_topic in set(self._last_sent) - topics:
            del self._last_sent[gone_topic]
        for topic in topics:
            payload = json.dumps(self.render(self.readings, topic), separators=(",", ":"))
            if self._last_sent.get(topic) == payload:
                continue
            self._last_sent[topic] = payload
            for subscription in list(self.subscriptions):
                if subscription.topic == topic:
                    subscription.offer(payload)


async def frames(subscription: Subscription, *,
                 keepalive_s: float = KEEPALIVE_S) -> Sequence[bytes] | None:
    """The next bytes to write on a stream: a data frame, a keep-alive, or None once closed."""
    try:
        await asyncio.wait_for(subscription.wake.wait(), timeout=keepalive_s)
    except TimeoutError:
        return [b": keep-alive\n\n"]
    subscription.wake.clear()
    if subscription.closed:
        return None
    payload, subscription.pending = subscription.pending, None
    if payload is None:
        return []
    return [b"event: update\ndata: ", payload.encode(), b"\n\n"]
