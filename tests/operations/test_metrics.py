"""Metrics read from Redis (the depth collector) and counted by the worker.

Covers: depth by state, oldest-ready age, live workers, queue-wide counters (hand-backs apart
from shutdown releases) and lock contention from a sync Queue on each scrape; the asyncio
refresh and ``antre_queue_depth_up`` 0 when Redis is unreachable; and a real ``antre worker
--metrics-port`` process whose /metrics shows the depth series and a processing-duration
histogram that counts failed runs as well as successful ones.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
import urllib.request
from pathlib import Path
from typing import Any

from antre import AsyncQueue, Queue, QueueSettings
from antre.depth_metrics import DepthCollector
from prometheus_client import CollectorRegistry, generate_latest
from redis_servers import child_env, free_port, wait_until

from operations import queue_states


def scrape(registry: CollectorRegistry) -> str:
    return generate_latest(registry).decode()


def test_depth_by_state_counters_and_lock_contention(redis_client: Any) -> None:
    queue = Queue(redis_client, "q")
    queue_states.register_worker(queue)
    queue_states.dead_letters(queue, [("E", 2)])
    queue_states.stuck_lease(queue)
    queue.enqueue("t", delay=60)
    # Two jobs on one resource: the claim leases the first and defers the second.
    queue.enqueue_many([{"type": "t", "resource_key": "acct-1"}] * 2)
    assert len(queue_states.claim(queue, 2)) == 1
    queue.enqueue_many([("t", i) for i in range(3)])

    registry = CollectorRegistry()
    registry.register(DepthCollector([queue]))
    text = scrape(registry)
    for state, value in [("ready", 3), ("processing", 2), ("expired_lease", 1), ("retry", 2),
                         ("retry_due", 0), ("dead", 2)]:
        assert f'antre_queue_jobs{{queue="q",state="{state}"}} {value}.0' in text, state
    assert 'antre_queue_workers{queue="q"} 1.0' in text
    assert 'antre_lock_contention_total{queue="q"} 1.0' in text
    assert 'antre_queue_events_total{event="dead",queue="q"} 2.0' in text
    assert 'antre_queue_events_total{event="enqueued",queue="q"} 9.0' in text
    assert 'antre_queue_depth_up{queue="q"} 1.0' in text
    assert 'antre_queue_oldest_ready_age_seconds{queue="q"}' in text


def test_dead_letters_past_their_retention_are_counted(redis_client: Any) -> None:
    """operations.md lists ``dead_expired`` among the events of antre_queue_events_total: the
    reaper's deletions of dead letters older than ``dead_ttl_s`` are counted in Redis, and an
    alert on dead letters vanishing unread needs the series."""
    queue = Queue(redis_client, settings=QueueSettings(name="q", dead_ttl_s=60))
    [job_id] = queue_states.dead_letters(queue, [("E", 1)])
    redis_client.zadd(queue.keys.dead, {job_id: 1})  # died long before the retention
    assert queue.reap().dead_expired == 1

    registry = CollectorRegistry()
    registry.register(DepthCollector([queue]))
    assert 'antre_queue_events_total{event="dead_expired",queue="q"} 1.0' in scrape(registry)


async def test_async_refresh_and_unreachable_redis(redis_client: Any, redis_url: str) -> None:
    Queue(redis_client, "q").enqueue("t")
    collector = DepthCollector()
    registry = CollectorRegistry()
    registry.register(collector)
    up, down = AsyncQueue.from_url(redis_url, "q"), AsyncQueue.from_url(
        f"redis://127.0.0.1:{free_port()}/0", "gone")
    try:
        await collector.refresh([up, down])
    finally:
        await up.close()
        await down.close()
    text = scrape(registry)
    assert 'antre_queue_jobs{queue="q",state="ready"} 1.0' in text
    assert 'antre_queue_depth_up{queue="gone"} 0.0' in text
    assert 'queue="gone",state=' not in text


HANDLERS = textwrap.dedent('''
    import antre

    @antre.handler("ok")
    async def ok(job):
        return None

    @antre.handler("boom")
    async def boom(job):
        raise antre.Permanent("no way")
''')


def test_worker_metrics_endpoint(redis_client: Any, redis_url: str, tmp_path: Path) -> None:
    (tmp_path / "metrics_handlers.py").write_text(HANDLERS)
    queue = Queue(redis_client, "mq")
    queue.enqueue("ok")
    queue.enqueue("boom")
    port = free_port()
    env = {**child_env(), "PYTHONPATH": f"{tmp_path}:{child_env().get('PYTHONPATH', '')}"}
    worker = subprocess.Popen(
        [sys.executable, "-m", "antre", "worker", "--redis-url", redis_url, "--queue", "mq",
         "--handlers", "metrics_handlers", "--metrics-port", str(port), "--log-level", "WARNING"],
        env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        def metrics() -> str:
            if worker.poll() is not None:
                raise RuntimeError(f"worker exited: {worker.stderr.read().decode()[-2000:]}")
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=2) as resp:
                return str(resp.read().decode())

        def settled() -> str | None:
            text = metrics()
            done = 'antre_queue_jobs{queue="mq",state="dead"} 1.0' in text
            acked = 'antre_jobs_total{outcome="succeeded",queue="mq",type="ok"} 1.0' in text
            return text if done and acked else None

        text = str(wait_until(settled, timeout_s=20, message="both jobs settled in /metrics"))
        assert 'antre_job_duration_seconds_count{queue="mq",type="ok"} 1.0' in text
        assert 'antre_job_duration_seconds_count{queue="mq",type="boom"} 1.0' in text
        assert 'antre_jobs_total{outcome="dead",queue="mq",type="boom"} 1.0' in text
        assert 'antre_queue_workers{queue="mq"} 1.0' in text
    finally:
        worker.terminate()
        _, stderr = worker.communicate(timeout=30)
    assert worker.returncode == 0, stderr.decode()[-2000:]


def test_hand_backs_are_counted_apart_from_shutdown_releases(redis_client: Any) -> None:
    """``released`` is what shows scale-downs and grace periods too short; routine hand-backs
    of prefetched jobs are their own series and must not grow it."""
    queue = Queue(redis_client, "q")
    queue_states.handed_back_and_released(queue)
    registry = CollectorRegistry()
    registry.register(DepthCollector([queue]))
    text = scrape(registry)
    assert 'antre_queue_events_total{event="handed_back",queue="q"} 1.0' in text
    assert 'antre_queue_events_total{event="released",queue="q"} 1.0' in text
