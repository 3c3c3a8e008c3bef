"""SIGTERM to a worker while it runs jobs (a Kubernetes scale-down or rollout).

Covers, for ``async def`` and plain ``def`` handlers: jobs that finish inside the grace period are
acked by the stopping worker; the rest are released at the end of it (history ``released``, the
attempt refunded) and finished by another worker at attempt 1, long before a visibility timeout;
the SIGTERMed worker exits 0 within the grace period, even with a handler thread still running.
"""

from __future__ import annotations

import signal
import time

import pytest
import redis
from antre import Queue, QueueSettings
from fault_support import SpawnWorker, check_invariants, effect_count, runs
from redis_servers import RedisServer, wait_until

GRACE_S = 3.0
VISIBILITY_TIMEOUT_S = 20.0
#: Process start-up and the release round trip, on a slow CI machine.
SLACK_S = 2.0


@pytest.mark.parametrize("job_type", [pytest.param("record_async", id="async-handler"),
                                      pytest.param("record", id="thread-handler")])
def test_sigterm_releases_running_jobs_to_another_worker(
        job_type: str, spawn_worker: SpawnWorker, fault_redis: RedisServer,
        fault_client: redis.Redis, queue_settings: QueueSettings) -> None:
    queue = Queue.from_url(fault_redis.url, settings=queue_settings)
    a = spawn_worker("a", concurrency=4, visibility_timeout_s=VISIBILITY_TIMEOUT_S,
                     grace_period_s=GRACE_S)
    a_id = a.worker_id()
    short = [queue.enqueue(job_type, {"sleep_s": 2.0, "sleep_in": ["a"]},
                           idempotency_key=f"short-{i}").job_id for i in range(2)]
    long = [queue.enqueue(job_type, {"sleep_s": 60, "sleep_in": ["a"]},
                          idempotency_key=f"long-{i}").job_id for i in range(2)]
    wait_until(lambda: all(runs(fault_client, job_id) == 1 for job_id in short + long),
               message="a to start all four jobs")
    b = spawn_worker("b", concurrency=4, visibility_timeout_s=VISIBILITY_TIMEOUT_S)
    b_id = b.worker_id()

    sigterm_at = time.monotonic()
    a.signal(signal.SIGTERM)
    assert a.process.wait(timeout=GRACE_S + SLACK_S + 5) == 0
    exited_after_s = time.monotonic() - sigterm_at
    assert exited_after_s < GRACE_S + SLACK_S, f"a took {exited_after_s:.1f}s to exit"

    wait_until(lambda: all(queue.get(job_id).status == "done" for job_id in long),
               timeout_s=SLACK_S + 3, message="released jobs done on b")
    finished_after_s = time.monotonic() - sigterm_at
    assert finished_after_s < VISIBILITY_TIMEOUT_S / 2, "released jobs must not wait for a lease"

    for job_id in short:
        info = queue.get(job_id)
        assert info.status == "done" and info.attempt == 1
        assert [(e.event, e.worker) for e in info.history if e.event in ("claimed", "acked")] == [
            ("claimed", a_id), ("acked", a_id)], "finished inside the grace period, on a"
        assert "released" not in [e.event for e in info.history]
    for i, job_id in enumerate(long):
        info = queue.get(job_id)
        assert info.status == "done" and info.attempt == 1, "release refunds the attempt"
        events = [e for e in info.history if e.event != "extended"]
        assert [(e.event, e.worker, e.attempt) for e in events] == [
            ("enqueued", None, 0), ("claimed", a_id, 1), ("released", a_id, 1),
            ("claimed", b_id, 1), ("acked", b_id, 1)]
        assert runs(fault_client, job_id) == 2
        assert effect_count(fault_client, f"long-{i}") == 1
        assert fault_client.get(f"effects:long-{i}") == "b:1"
        assert a.events("released", job_id)
    assert queue.stats().counters.get("released") == 2
    assert b.alive()
    check_invariants(fault_client, queue_settings)
