"""What a worker tells the outside world about itself: the registry entry, /healthz, /metrics.

Aspects: slots held by handler threads past their job timeout show in the registry, in
``antre inspect`` and ``antre doctor``, on /healthz (503 once no slot is left) and as a metric
(issue 13.4); per-type metrics give job types this worker has no handler for one shared label
value (issue 12.9); the end-to-end latency and the uptime are measured on the Redis clock
alone, never against the worker's own (issue 10.6).
"""

from __future__ import annotations

import threading
import time

import aiohttp
import pytest
from antre import HandlerRegistry, Job, Queue, cli
from antre.metrics import UNKNOWN_TYPE, WorkerMetrics
from antre.metrics_server import serve_metrics
from prometheus_client import generate_latest
from worker_harness import eventually, running_worker, status_of


async def get(url: str) -> tuple[int, str]:
    # aiohttp, not urllib: the server answers on this very event loop.
    async with aiohttp.ClientSession() as session, session.get(url) as response:
        return response.status, await response.text()


async def test_slots_held_by_threads_past_their_timeout_are_visible(redis_client, redis_url, aredis,
                                                                     qs, capsys):
    """Seen before: four def handlers past --job-timeout held every slot; a new job waited while
    `antre inspect` showed `jobs 0/4`, /healthz said ok, doctor said nothing."""
    registry = HandlerRegistry()
    hang = threading.Event()

    @registry.handler("stuck")
    def stuck(job: Job) -> None:
        hang.wait(30)

    queue = Queue(redis_client, settings=qs)
    ids = [queue.enqueue("stuck", max_attempts=1, resource_key=resource).job_id
           for resource in ("acct-1", None)]
    metrics = WorkerMetrics(qs.name)
    try:
        async with running_worker(aredis, qs, registry, concurrency=2, job_timeout_s=0.2,
                                  visibility_timeout_s=1.5, metrics=metrics) as worker:
            server = await serve_metrics(metrics.registry, port=0, host="127.0.0.1",
                                         health=worker.health)
            try:
                await eventually(lambda: all(status_of(redis_client, qs, i) == "dead" for i in ids))
                [entry] = await eventually(lambda: [e for e in queue.workers()
                                                    if e.stuck_threads == 2], timeout_s=5)
                assert (entry.in_flight, entry.concurrency) == (0, 2)
                base = f"http://127.0.0.1:{server.port}"
                status, body = await get(f"{base}/healthz")
                assert (status, body) == (503, "no free slot; 2 of 2 slot(s) held by handler "
                                               "threads past their job timeout\n")
                status, text = await get(f"{base}/metrics")
                assert f'antre_worker_stuck_threads{{queue="{qs.name}"}} 2.0' in text
                args = ["--redis-url", redis_url, "--queue", qs.name]
                assert cli.main(["inspect", *args, "--sample-gap", "0"]) == 0
                shown = capsys.readouterr().out
                assert "jobs 0/2" in shown and "stuck threads 2" in shown
                assert cli.main(["doctor", *args, "--sample-gap", "0"]) == 2
                advice = capsys.readouterr().out
                assert "CRITICAL stuck_threads: worker w1 (pod" in advice
                assert "2 of 2 slot(s) held by handler threads past their job timeout" in advice
                # The lock of the first job is kept (extended) while its thread runs.
                assert (f"WARNING  lock_kept_for_thread: resource lock 'acct-1' is kept for job "
                        f"{ids[0]}, whose handler still runs (a thread past its timeout") in advice
                assert "orphaned_lock" not in advice
                hang.set()
                await eventually(lambda: worker.threads.overdue == 0)
                status, body = await get(f"{base}/healthz")
                assert (status, body) == (200, "ok\n")
            finally:
                await server.cleanup()
    finally:
        hang.set()


async def test_job_types_without_a_handler_share_one_metric_label(redis_client, aredis, qs):
    """Any enqueuer can invent job types: 200 random ones grew /metrics from 2.7 KB to 410 KB,
    a series per type. Types this worker has no handler for now share one label value."""
    registry = HandlerRegistry()
    registry.register("known", lambda job: None)
    queue = Queue(redis_client, settings=qs)
    queue.enqueue_many([(f"invented-{i}", None) for i in range(200)])
    known = queue.enqueue("known").job_id
    metrics = WorkerMetrics(qs.name)
    async with running_worker(aredis, qs, registry, metrics=metrics, concurrency=50):
        await eventually(lambda: status_of(redis_client, qs, known) == "done")
        await eventually(lambda: metrics.jobs.labels(qs.name, UNKNOWN_TYPE, "retried")
                         ._value.get() >= 200, timeout_s=20)
    text = generate_latest(metrics.registry).decode()
    assert "invented-" not in text
    types = {line.split('type="')[1].split('"')[0] for line in text.splitlines()
             if 'type="' in line}
    assert types == {"known", UNKNOWN_TYPE}
    assert len(text) < 20_000


@pytest.mark.parametrize("offset_s", [pytest.param(-3600.0, id="worker-clock-1h-behind"),
                                      pytest.param(3600.0, id="worker-clock-1h-ahead")])
async def test_latency_and_uptime_use_the_redis_clock_only(redis_client, aredis, qs, monkeypatch,
                                                           offset_s):
    """PROTOCOL.md says no two clocks are compared; the latency histogram and the uptime did
    compare Redis time with the worker's. A worker whose clock is an hour off still reports a
    latency of milliseconds and an uptime of seconds."""
    registry = HandlerRegistry()
    registry.register("t", lambda job: None)
    job_id = Queue(redis_client, settings=qs).enqueue("t").job_id
    real_time = time.time
    monkeypatch.setattr(time, "time", lambda: real_time() + offset_s)
    metrics = WorkerMetrics(qs.name)
    async with running_worker(aredis, qs, registry, metrics=metrics):
        await eventually(lambda: status_of(redis_client, qs, job_id) == "done")
        [entry] = Queue(redis_client, settings=qs).workers()
        seconds, micros = redis_client.time()
        assert abs(entry.started_at_ms - (seconds * 1000 + micros // 1000)) < 10_000
    latency = metrics.latency.labels(qs.name, "t")
    assert 0 <= latency._sum.get() < 5.0
