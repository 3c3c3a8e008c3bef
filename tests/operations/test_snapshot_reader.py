"""The snapshot reader behind ``antre inspect``/``doctor``/``top`` and the dashboard.

Covers: the asyncio reader returns what the sync one returns for the same state (one reader,
two drivers); the locks of running jobs are found through their records even when the SCAN
over the lock prefix stops at its bound in a big keyspace (and the snapshot says so); the
bounded SCAN still finds a lock no running job explains in a small keyspace; throughput (done
and failed runs per second) in the trend.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from antre import AsyncQueue, Queue, findings, snapshots
from antre.connection import connect_async
from antre.protocol.depth import Depth

from operations import queue_states


def _without_clock(snapshot: findings.Snapshot) -> dict[str, Any]:
    """The snapshot's content minus what moves with time between two reads."""
    data = findings.to_dict(snapshot, [])
    data.pop("now_ms")
    data.pop("trend")
    for lease in data["expired_leases"]:
        lease.pop("expired_for_s")
    for lock in data["locks"]:
        lock.pop("ttl_s")
    for worker in data["workers"]:
        worker.pop("read_at_ms")
        worker.pop("beat_age_s")
    data["depth"].pop("oldest_ready_age_s")
    return data


async def test_async_and_sync_readers_agree(redis_client: Any, redis_url: str) -> None:
    queue = Queue(redis_client, "q")
    queue_states.register_worker(queue)
    queue_states.stuck_lease(queue, resource_key="acct-1")
    queue_states.overdue_retry(queue)
    queue_states.dead_letters(queue, [("E1", 3), ("E2", 1)])
    queue.enqueue_many([("t", i) for i in range(4)])
    sync = snapshots.read_snapshot(queue, sample_gap_s=0)
    client = connect_async(redis_url)
    try:
        async_snapshot = await snapshots.read_snapshot_async(AsyncQueue(client, "q"))
    finally:
        await client.aclose()
    assert _without_clock(async_snapshot) == _without_clock(sync)
    assert [lock.resource for lock in sync.locks] == ["acct-1"] and sync.locks_complete


def test_running_jobs_locks_survive_a_bounded_scan(redis_client: Any) -> None:
    queue = Queue(redis_client, "q")
    job_id = queue_states.stuck_lease(queue, expired_s=0, resource_key="acct-7")
    # A keyspace far bigger than the SCAN bound (10 calls of COUNT 1000).
    pipe = redis_client.pipeline(transaction=False)
    for i in range(40_000):
        pipe.set(f"filler:{i}", "x")
    pipe.execute()
    snapshot = snapshots.read_snapshot(queue, sample_gap_s=0)
    assert not snapshot.locks_complete
    assert [(lock.resource, lock.job_id, lock.holder_processing) for lock in snapshot.locks] \
        == [("acct-7", job_id, True)]
    assert "bounded scan of a big keyspace" in findings.render(snapshot)


def test_a_job_settled_between_the_reads_is_left_out(redis_client: Any) -> None:
    """The reader lists the processing set, then reads those jobs' records: a job acked in
    between is a packed record (a String) by then. The dashboard's queue page answered 500 on
    that race (seen in the browser test); the job is simply no longer running."""
    queue = Queue(redis_client, "q")
    expired = queue_states.stuck_lease(queue, expired_s=0, resource_key="acct-1")
    running = queue_states.stuck_lease(queue, expired_s=-60, resource_key="acct-2")
    for job_id in (expired, running):  # as an ack that packs the record leaves it
        queue.redis.delete(queue.keys.job(job_id))
        queue.redis.set(queue.keys.job(job_id), '{"s":"done"}')
    snapshot = snapshots.read_snapshot(queue, sample_gap_s=0)
    assert snapshot.expired_leases == []
    assert sorted(lock.resource for lock in snapshot.locks) == ["acct-1", "acct-2"]


def test_scan_finds_a_lock_no_running_job_holds(redis_client: Any) -> None:
    queue = Queue(redis_client, "q")
    queue.redis.set(queue.keys.resource_lock("by-hand"), "someone:1", px=60_000)
    snapshot = snapshots.read_snapshot(queue, sample_gap_s=0)
    assert snapshot.locks_complete
    assert [(lock.resource, lock.holder_processing) for lock in snapshot.locks] \
        == [("by-hand", False)]


def test_an_overdue_delayed_job_is_read_while_it_is_a_queued_field(redis_client: Any) -> None:
    """A job enqueued with a delay stays a field of the queued Hash until claimed: doctor's
    overdue retries read it as every reader does (HMGET of a job key found nothing)."""
    queue = Queue(redis_client, "q")
    job_id = queue.enqueue("report", {}, delay=3600).job_id
    queue.redis.zadd(queue.keys.retry, {job_id: queue_states.server_ms(queue) - 120_000})
    snapshot = snapshots.read_snapshot(queue, sample_gap_s=0)
    assert [(retry.job_id, retry.job_type, retry.attempt) for retry in snapshot.overdue_retries] \
        == [(job_id, "report", 0)]


def test_throughput_from_the_counters() -> None:
    def depth(now_ms: int, **counters: int) -> Depth:
        return Depth(now_ms=now_ms, ready=0, processing=0, expired_leases=0, scheduled=0, due=0,
                     dead=0, oldest_ready_age_s=None, workers=0, counters=counters)

    before = depth(1_000, done=10, retried=1, dead=0)
    after = depth(3_000, done=30, retried=3, dead=2)
    assert findings.throughput(before, after) == findings.Throughput(done_per_s=10.0,
                                                                     failed_per_s=2.0)
    # Counters reset (stats hash deleted): no negative rates; unordered samples: no rate.
    assert findings.throughput(after, dataclasses.replace(after, now_ms=5_000, counters={})) \
        == findings.Throughput(done_per_s=0.0, failed_per_s=0.0)
    assert findings.throughput(after, before) is None
    snapshot = findings.Snapshot(queue="q", before=before, after=after)
    assert "done 10.0/s, failed 2.0/s" in findings.render(snapshot)


def test_a_polling_reader_reads_only_new_dead_letters(redis_client: Any) -> None:
    queue = Queue(redis_client, "q")
    first = queue_states.dead_letters(queue, [("E1", 4)])

    def dead_record_reads() -> int:
        """Dead records read: each is packed, one GET (no worker is registered here)."""
        stats = redis_client.info("commandstats")
        return int(stats.get("cmdstat_get", {}).get("calls", 0))

    known = snapshots.DeadCache()
    snapshots.read_snapshot(queue, sample_gap_s=0, known_dead=known)
    assert len(known) == 4
    before = dead_record_reads()
    again = snapshots.read_snapshot(queue, sample_gap_s=0, known_dead=known)
    assert dead_record_reads() == before  # nothing new died: no record read again
    assert [job.job_id for job in again.dead_jobs] == list(reversed(first))
    # One more dies, and one is replayed and dies again with another error: both are read.
    second = queue_states.dead_letters(queue, [("E2", 1)])
    queue.replay([first[0]])
    [lease] = queue_states.claim(queue, 1)
    assert queue_states.fail(queue, lease, error="E3", retry_delay_ms=None) == "dead"
    before = dead_record_reads()
    latest = snapshots.read_snapshot(queue, sample_gap_s=0, known_dead=known)
    assert dead_record_reads() - before == 2
    errors = {job.job_id: job.last_error for job in latest.dead_jobs}
    assert errors[second[0]] == "E2" and errors[first[0]] == "E3"
    assert len(known) == 5
