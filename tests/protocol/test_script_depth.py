"""depth.lua and workers.lua: the read-only views an autoscaler and the inspection tools use."""

from __future__ import annotations

import json

from antre.client import Queue
from antre.protocol import scripts
from antre.protocol.depth import depth_op
from antre.protocol.workers import workers_op
from protocol_state import dump, run_fresh, seed_job, server_ms


def test_depth_counts_every_place(redis_client, qs):
    now = server_ms(redis_client)
    seed_job(redis_client, qs, "r1", queued_at=now - 2000)
    seed_job(redis_client, qs, "r2")
    seed_job(redis_client, qs, "p1", status="processing", attempt=1, lease=1, score_ms=now - 1)
    seed_job(redis_client, qs, "p2", status="processing", attempt=1, lease=1)
    seed_job(redis_client, qs, "s1", status="scheduled", score_ms=now - 1)
    seed_job(redis_client, qs, "s2", status="scheduled", score_ms=now + 60_000)
    seed_job(redis_client, qs, "d1", status="dead", attempt=5, lease=5)
    redis_client.hset(qs.keys.stats, mapping={"done": 4, "enqueued": 9})
    redis_client.zadd(qs.keys.workers, {"w": now})
    before = dump(redis_client, qs)
    depth = run_fresh(redis_client, depth_op(qs))
    assert (depth.ready, depth.processing, depth.expired_leases, depth.scheduled, depth.due,
            depth.dead, depth.workers) == (2, 2, 1, 2, 1, 1, 1)
    assert depth.backlog == 3
    assert depth.oldest_ready_age_s is not None and 2.0 <= depth.oldest_ready_age_s < 10
    assert depth.counters == {"done": 4, "enqueued": 9}
    assert dump(redis_client, qs) == before  # read only


def test_depth_of_an_empty_queue(redis_client, qs):
    depth = Queue(redis_client, settings=qs).stats()
    assert (depth.ready, depth.processing, depth.dead, depth.oldest_ready_age_s) == (0, 0, 0, None)
    assert depth.counters == {}


def test_workers_lists_live_entries_only(redis_client, qs):
    now = server_ms(redis_client)
    entry = {"pod": "web-1", "host": "h", "pid": 7, "in_flight": 2, "concurrency": 8,
             "started_at_ms": now - 1000}
    redis_client.set(qs.keys.worker("w1"), json.dumps(entry), px=10_000)
    redis_client.set(qs.keys.worker("odd"), "{not json", px=10_000)
    redis_client.zadd(qs.keys.workers, {"w1": now - 500, "expired": now - 500, "odd": now})
    registry = scripts.run(redis_client, workers_op(qs))
    [worker] = registry.entries
    assert registry.unreadable == ["odd"]  # reported, and it hides nobody
    assert (worker.worker_id, worker.pod, worker.pid, worker.in_flight, worker.concurrency) == (
        "w1", "web-1", 7, 2, 8)
    assert worker.last_beat_ms == now - 500 and 0.5 <= worker.beat_age_s < 5
    assert Queue(redis_client, settings=qs).workers()[0].worker_id == "w1"
