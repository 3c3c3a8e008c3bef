"""An ``antre worker`` started on a ``redis+sentinel://`` URL keeps working across two kill -9
failovers in a row, by itself: no restart, no lost or stuck job, each job's effect performed
once, the queue's structures consistent on the new primary.
"""

from __future__ import annotations

from typing import Any

import redis
from antre import Queue, QueueSettings, connection
from fault_support import QUEUE, SpawnWorker, check_invariants, effect_count
from invariants import read_records
from redis_sentinels import SentinelGroup
from redis_servers import wait_until


def all_done(group: SentinelGroup, settings: QueueSettings, job_ids: list[str]) -> bool:
    """Whether every job is done on the current primary."""
    with group.primary_client() as client:
        return all(record.get("status") == "done"
                   for record in read_records(client, settings, job_ids))


def wait_done(group: SentinelGroup, settings: QueueSettings, job_ids: list[str], *,
              timeout_s: float, message: str) -> None:
    wait_until(lambda: all_done(group, settings, job_ids), timeout_s=timeout_s, message=message)


def wait_running(effects: redis.Redis, job_ids: list[str]) -> None:
    wait_until(lambda: effects.exists(*(f"runs:{i}" for i in job_ids)), timeout_s=10,
               message="jobs running when the primary is killed")


def test_a_worker_follows_two_failovers(sentinels: SentinelGroup, spawn_worker: SpawnWorker,
                                        redis_client: Any) -> None:
    settings = QueueSettings(name=QUEUE)
    worker = spawn_worker("w1", concurrency=4, visibility_timeout_s=2.0)
    producer = Queue(connection.connect(sentinels.url()), settings=settings)
    enqueued: list[str] = []

    def enqueue_batch(count: int, sleep_s: float) -> list[str]:
        ids = [producer.enqueue("record", {"sleep_s": sleep_s}).job_id for _ in range(count)]
        # Replicated before anything is killed: this test is about the worker, not about
        # enqueues lost with the primary (test_failover_under_load counts those).
        assert producer.redis.wait(2, 5000) == 2
        enqueued.extend(ids)
        return ids

    try:
        wait_done(sentinels, settings, enqueue_batch(10, 0.0), timeout_s=20,
                  message="the first batch done before any failover")
        for _ in range(2):
            # Jobs in flight when the primary dies: their leases, acks and effects cross it.
            in_flight = enqueue_batch(8, 0.3)
            wait_running(redis_client, in_flight)
            sentinels.fail_over()
            wait_done(sentinels, settings, in_flight + enqueue_batch(10, 0.0), timeout_s=40,
                      message="the jobs around the failover done")
        assert worker.alive(), worker.log_path.read_text()
        assert all_done(sentinels, settings, enqueued)
        for job_id in enqueued:
            assert effect_count(redis_client, job_id) == 1, job_id
        with sentinels.primary_client() as primary:
            check_invariants(primary, settings)
        assert [entry for entry in worker.log_lines() if entry.get("msg") == "worker started"]
    finally:
        producer.close()
