"""The Redis cost of live updates is per server, not per tab.

Covers: one live tick costs the same Redis commands with one open overview tab as with
twenty-five; ten tabs on one queue's page add that queue's health read once, as one tab does;
the same fragments reach every tab of a topic; tabs on one job's page cost one read of its
record per tick, however many; with every tab closed the sampler stops and the dashboard sends
Redis nothing; a tick that cannot read Redis keeps the streams open; the frame of a page
closed since is dropped, so reopening it never shows the state it had when it closed.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from typing import Any

import pytest
from antre import Queue, settings
from antre.dashboard import live
from antre.dashboard.live import Subscription
from antre.dashboard.state import Dashboard, DashboardSettings
from redis_servers import eventually

from dashboard.conftest import QUEUES, TOKEN


def commands(redis_client: Any) -> int:
    """Commands Redis ran so far (those inside scripts included), minus INFO itself."""
    stats = redis_client.info("commandstats")
    return sum(v["calls"] for k, v in stats.items() if k != "cmdstat_info")


@pytest.fixture
async def dashboard(aredis: Any, redis_client: Any) -> AsyncIterator[Dashboard]:
    queue = Queue(redis_client, "emails")
    queue.enqueue_many([("t", {"i": i}) for i in range(10)])
    # Intervals far longer than the test: the background loop makes its first tick and then
    # sleeps, and the test runs the ticks it measures itself.
    board = Dashboard(aredis, settings.QueueSettings(),
                      DashboardSettings(live_interval_s=60, detail_interval_s=300),
                      token=TOKEN, queues=QUEUES)
    yield board
    await board.monitor.close()


async def first_frame(subscription: Subscription) -> None:
    """The background loop's first tick has ended: it sent this tab its first frame."""
    await eventually(lambda: subscription.pending is not None, message="the first frame")


async def measured_step(board: Dashboard, redis_client: Any) -> int:
    board.monitor._detail_read_at.clear()  # every measured tick reads health again
    before = commands(redis_client)
    await board.monitor.step()
    return commands(redis_client) - before


async def test_cost_per_tick_does_not_grow_with_tabs(dashboard: Dashboard,
                                                     redis_client: Any) -> None:
    monitor = dashboard.monitor
    first = monitor.subscribe("overview")
    await first_frame(first)
    one_tab = await measured_step(dashboard, redis_client)
    tabs = [monitor.subscribe("overview") for _ in range(24)]
    many_tabs = await measured_step(dashboard, redis_client)
    assert one_tab == many_tabs > 0
    # The overview reads the depth of each queue in scope: one script call each.
    assert one_tab == sum([await _depth_script_cost(dashboard, name, redis_client)
                           for name in QUEUES])

    queue_tab = monitor.subscribe("queue:emails")
    await measured_step(dashboard, redis_client)  # loads the health read's scripts (NOSCRIPT)
    with_one_queue_tab = await measured_step(dashboard, redis_client)
    more = [monitor.subscribe("queue:emails") for _ in range(9)]
    with_ten_queue_tabs = await measured_step(dashboard, redis_client)
    assert with_one_queue_tab == with_ten_queue_tabs > many_tabs

    # Every tab of a topic gets the same frame.
    for subscription in (first, *tabs):
        assert subscription.pending == first.pending
    fragments = json.loads(queue_tab.pending or "{}")
    assert set(fragments) == {"depth", "health"}
    assert all(s.pending == queue_tab.pending for s in more)


async def _depth_script_cost(board: Dashboard, name: str, redis_client: Any) -> int:
    before = commands(redis_client)
    await board.queue(name).stats()
    return commands(redis_client) - before


async def test_no_tab_no_traffic(dashboard: Dashboard, redis_client: Any) -> None:
    monitor = dashboard.monitor
    subscription = monitor.subscribe("overview")
    await first_frame(subscription)
    monitor.unsubscribe(subscription)
    monitor.interval_s = 0.05  # the loop wakes soon, sees no subscriber and ends
    assert monitor._task is not None
    monitor._task.cancel()  # wake it from its long sleep
    await asyncio.gather(monitor._task, return_exceptions=True)
    before = commands(redis_client)
    await asyncio.sleep(10 * monitor.interval_s)  # ten of the loop's intervals: not one read
    assert commands(redis_client) - before == 0


async def test_a_failing_tick_keeps_streams(dashboard: Dashboard, redis_client: Any) -> None:
    monitor = dashboard.monitor
    subscription = monitor.subscribe("overview")
    await first_frame(subscription)

    async def unreachable(_names: Any) -> Any:
        raise ConnectionError("Redis went away")

    monitor.read_depths = unreachable
    await monitor.step()
    assert subscription in monitor.subscriptions and not subscription.closed
    assert monitor.readings.errors[""] == "Redis went away"


async def test_tabs_on_one_job_share_its_read(dashboard: Dashboard, redis_client: Any) -> None:
    monitor = dashboard.monitor
    job_id = Queue(redis_client, "emails").enqueue("t", {"i": 99}).job_id
    first = monitor.subscribe(live.job_topic("emails", job_id))
    await first_frame(first)
    one_tab = await measured_step(dashboard, redis_client)
    more = [monitor.subscribe(live.job_topic("emails", job_id)) for _ in range(9)]
    assert await measured_step(dashboard, redis_client) == one_tab
    before = commands(redis_client)
    await dashboard.read_job("emails", job_id)  # what a page load of the job reads
    assert one_tab == commands(redis_client) - before
    frame = json.loads(first.pending or "{}")["job-live"]
    assert job_id in frame and "queued" in frame
    assert 'name="csrf" value=""' in frame  # each tab fills in its own session's token
    # The record deleted (expired, purged): the page says so at the next tick.
    keys = Queue(redis_client, "emails").keys
    redis_client.hdel(keys.queued, job_id)
    redis_client.delete(keys.job(job_id))
    await monitor.step()
    assert "record is gone" in json.loads(first.pending or "{}")["job-live"]
    assert all(s.pending == first.pending for s in more)


async def test_a_closed_pages_frame_is_not_kept(dashboard: Dashboard, redis_client: Any) -> None:
    """While any tab stays open (the overview on a second screen), the frames of pages closed
    since are dropped: a job's page opened again does not first get the job as it was when
    its last tab closed (a cancelled job shown queued, with its Cancel button), and every job
    page ever opened does not stay in the server's memory."""
    monitor = dashboard.monitor
    overview = monitor.subscribe("overview")
    await first_frame(overview)
    queue = Queue(redis_client, "emails")
    job_ids = [queue.enqueue("t", {"i": i}).job_id for i in range(20)]
    for job_id in job_ids:
        tab = monitor.subscribe(live.job_topic("emails", job_id))
        await monitor.step()
        assert "queued" in json.loads(tab.pending or "{}")["job-live"]
        monitor.unsubscribe(tab)
    assert queue.cancel(job_ids[0]) == "queued"
    await monitor.step()
    reopened = monitor.subscribe(live.job_topic("emails", job_ids[0]))
    assert reopened.pending is None or "cancelled" in reopened.pending, reopened.pending
    assert set(monitor._last_sent) <= {"overview", live.job_topic("emails", job_ids[0])}
