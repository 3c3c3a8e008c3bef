"""Jobs a worker prefetched (leased ahead of a free slot, not started) when it dies or is stopped.

Covers: a SIGKILLed worker's prefetched jobs are requeued by the reaper one visibility timeout
later and run exactly once, by another worker (the lost lease counts as an attempt, as for a
running job: the record cannot tell them apart); a SIGTERMed worker gives its prefetched jobs
back at once, unstarted and with the attempt refunded, while its running jobs use the grace
period; nothing is lost and the queue's invariants hold.
"""

from __future__ import annotations

import signal
import time

import redis
from antre import Queue, QueueSettings
from fault_support import SpawnWorker, WorkerProcess, check_invariants, effect_count, runs
from redis_servers import RedisServer, wait_until

VISIBILITY_TIMEOUT_S = 2.0


def _hold_and_prefetch(queue: Queue, fault_client: redis.Redis, spawn_worker: SpawnWorker,
                       **worker_args: float) -> tuple[WorkerProcess, list[str], list[str]]:
    """Worker a with 2 slots busy on long jobs and one job prefetched behind them. A worker
    prefetches only while its jobs finish within a few claim round trips, so short jobs come
    first, in the same batch: the long ones and the one behind them are claimed while the
    worker still measures the short ones' pace."""
    # Held until the signal, not handed back as work that turned long (antre.prefetch).
    a = spawn_worker("a", concurrency=2, extra_env={"FAULT_HAND_BACK_MIN_S": "3600"},
                     **worker_args)
    a.worker_id()
    results = queue.enqueue_many(
        [{"type": "record", "payload": {}} for _ in range(40)]
        + [{"type": "record", "payload": {"sleep_s": 60, "sleep_in": ["a"]},
            "idempotency_key": f"busy-{i}"} for i in range(2)]
        + [{"type": "record", "payload": {}, "idempotency_key": "waiting-0"}])
    busy, waiting = [r.job_id for r in results[40:42]], [results[42].job_id]
    wait_until(lambda: all(runs(fault_client, job_id) == 1 for job_id in busy),
               message="a to start both long jobs")
    wait_until(lambda: all(queue.get(job_id).status == "processing" for job_id in waiting),
               message="a to prefetch the queued job")
    assert all(runs(fault_client, job_id) == 0 for job_id in waiting), "prefetched, not started"
    return a, busy, waiting


def test_sigkilled_worker_prefetched_jobs_run_once_elsewhere(
        spawn_worker: SpawnWorker, fault_redis: RedisServer, fault_client: redis.Redis,
        queue_settings: QueueSettings) -> None:
    queue = Queue.from_url(fault_redis.url, settings=queue_settings)
    a, busy, waiting = _hold_and_prefetch(queue, fault_client, spawn_worker,
                                          visibility_timeout_s=VISIBILITY_TIMEOUT_S)
    a.signal(signal.SIGKILL)
    a.process.wait(timeout=10)
    b = spawn_worker("b", concurrency=4, visibility_timeout_s=VISIBILITY_TIMEOUT_S)
    b_id = b.worker_id()
    wait_until(lambda: all(queue.get(job_id).status == "done" for job_id in busy + waiting),
               timeout_s=30, message="every job done on b")
    for i, job_id in enumerate(waiting):
        info = queue.get(job_id)
        assert runs(fault_client, job_id) == 1, "the prefetched job ran once, on b"
        assert effect_count(fault_client, f"waiting-{i}") == 1
        assert fault_client.get(f"effects:waiting-{i}") == f"b:{info.attempt}"
        assert [e.event for e in info.history if e.event != "extended"] == [
            "enqueued", "claimed", "lease_expired", "claimed", "acked"]
        assert info.history[-1].worker == b_id
    for i in range(len(busy)):
        assert effect_count(fault_client, f"busy-{i}") == 1
    check_invariants(fault_client, queue_settings)


def test_sigterm_gives_prefetched_jobs_back_at_once(
        spawn_worker: SpawnWorker, fault_redis: RedisServer, fault_client: redis.Redis,
        queue_settings: QueueSettings) -> None:
    queue = Queue.from_url(fault_redis.url, settings=queue_settings)
    a, busy, waiting = _hold_and_prefetch(queue, fault_client, spawn_worker,
                                          visibility_timeout_s=30.0, grace_period_s=3.0)
    a_id = a.worker_id()
    b = spawn_worker("b", concurrency=4, visibility_timeout_s=30.0)
    b_id = b.worker_id()
    sigterm_at = time.monotonic()
    a.signal(signal.SIGTERM)
    # Given back before the grace period of the running jobs is over.
    wait_until(lambda: all(queue.get(job_id).status == "done" for job_id in waiting),
               timeout_s=2.5, message="the prefetched jobs done on b within the grace period")
    assert time.monotonic() - sigterm_at < 3.0
    assert a.process.wait(timeout=10) == 0
    wait_until(lambda: all(queue.get(job_id).status == "done" for job_id in busy),
               timeout_s=10, message="the released long jobs done on b")
    for i, job_id in enumerate(waiting):
        info = queue.get(job_id)
        assert info.attempt == 1, "the release refunds the attempt of a job never started"
        assert [(e.event, e.worker) for e in info.history if e.event != "extended"] == [
            ("enqueued", None), ("claimed", a_id), ("released", a_id), ("claimed", b_id),
            ("acked", b_id)]
        assert runs(fault_client, job_id) == 1
        assert effect_count(fault_client, f"waiting-{i}") == 1
    check_invariants(fault_client, queue_settings)
