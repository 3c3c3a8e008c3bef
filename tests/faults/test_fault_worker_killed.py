"""kill -9 of a worker mid-job.

Covers: the lost lease is requeued by another worker's reaper after the (short) visibility
timeout and the job completes exactly once elsewhere; the attempt count and the history show the
lost attempt; with many jobs in flight, every one completes and every effect happens once.
"""

from __future__ import annotations

import signal

import redis
from antre import Queue, QueueSettings
from fault_support import SpawnWorker, check_invariants, effect_count, runs
from redis_servers import RedisServer, wait_until


def lifecycle(queue: Queue, job_id: str) -> list[str]:
    """The job's history without heartbeat extensions."""
    return [event.event for event in queue.get(job_id).history if event.event != "extended"]


def test_job_of_a_killed_worker_completes_once_on_another(
        spawn_worker: SpawnWorker, fault_redis: RedisServer, fault_client: redis.Redis,
        queue_settings: QueueSettings) -> None:
    queue = Queue.from_url(fault_redis.url, settings=queue_settings)
    a = spawn_worker("a")
    a_id = a.worker_id()
    job_id = queue.enqueue("record", {"sleep_s": 60, "sleep_in": ["a"]},
                           idempotency_key="kill9-single").job_id
    wait_until(lambda: runs(fault_client, job_id) == 1, message="worker a to start the job")
    b = spawn_worker("b")
    b_id = b.worker_id()

    a.signal(signal.SIGKILL)
    assert a.process.wait(timeout=10) == -signal.SIGKILL

    wait_until(lambda: queue.get(job_id).status == "done", timeout_s=15, message="job done on b")
    info = queue.get(job_id)
    assert info.attempt == 2, "the attempt lost with worker a counts"
    assert lifecycle(queue, job_id) == ["enqueued", "claimed", "lease_expired", "claimed", "acked"]
    claims = [e for e in info.history if e.event == "claimed"]
    assert [(e.worker, e.attempt) for e in claims] == [(a_id, 1), (b_id, 2)]
    expired = next(e for e in info.history if e.event == "lease_expired")
    assert "lease expired during attempt 1" in (expired.error or "")
    assert runs(fault_client, job_id) == 2
    assert effect_count(fault_client, "kill9-single") == 1
    assert fault_client.get("effects:kill9-single") == "b:2"
    assert b.alive()
    check_invariants(fault_client, queue_settings)


def test_killed_worker_with_many_jobs_in_flight_loses_none(
        spawn_worker: SpawnWorker, fault_redis: RedisServer, fault_client: redis.Redis,
        queue_settings: QueueSettings) -> None:
    queue = Queue.from_url(fault_redis.url, settings=queue_settings)
    a = spawn_worker("a", concurrency=4)
    b = spawn_worker("b", concurrency=4)
    jobs = [r.job_id for r in queue.enqueue_many(
        {"type": "record", "payload": {"sleep_s": 0.15}, "idempotency_key": f"many-{i}"}
        for i in range(40))]
    # Kill a while it holds leases: some work is done, plenty is left.
    wait_until(lambda: sum(effect_count(fault_client, f"many-{i}") for i in range(40)) >= 8,
               message="a first share of the jobs to be done")
    a.signal(signal.SIGKILL)
    a.process.wait(timeout=10)

    wait_until(lambda: queue.stats().counters.get("done", 0) == 40, timeout_s=30,
               message="all 40 jobs done")
    lost = 0
    for i, job_id in enumerate(jobs):
        info = queue.get(job_id)
        assert info.status == "done"
        assert effect_count(fault_client, f"many-{i}") == 1, f"job {i}: effect not exactly once"
        if "lease_expired" in lifecycle(queue, job_id):
            lost += 1
            assert info.attempt == 2
        else:
            assert info.attempt == 1
        assert runs(fault_client, job_id) <= info.attempt
    # Its 4 slots, what it prefetched (at most the concurrency, by default) and finished runs
    # whose ack was still on its way.
    assert 1 <= lost <= 12, "worker a held a bounded number of leases when it died"
    assert b.alive()
    check_invariants(fault_client, queue_settings)
