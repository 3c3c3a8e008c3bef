"""What one script call takes at most (MAX_JOBS_PER_CALL), so no call holds Redis long: a claim
asking for more than the cap, a heartbeat of more leases than the cap split into calls whose
results merge in lease order, and reaper batches larger than Lua's unpack limit."""

from __future__ import annotations

import pytest
from antre.client import Queue
from antre.protocol import scripts
from antre.protocol.ack import ack_op
from antre.protocol.claim import claim_op
from antre.protocol.extend_lease import extend_lease_ops, merged
from antre.protocol.fail import fail_op
from antre.protocol.reap import reap_op
from antre.settings import WorkerSettings
from invariants import assert_invariants
from protocol_state import dump
from redis_servers import script_calls, script_usec

CAP = scripts.MAX_JOBS_PER_CALL


def test_a_claim_takes_at_most_the_cap(redis_client, qs, ws):
    Queue(redis_client, settings=qs).enqueue_many([("t", None)] * (CAP + 7))
    result = scripts.run(redis_client, claim_op(qs, ws, worker_id="w1", max_jobs=10_000))
    assert len(result.jobs) == CAP
    assert len(dump(redis_client, qs)["ready"]) == 7
    assert_invariants(redis_client, qs)


def test_a_heartbeat_of_many_leases_goes_in_calls_and_merges_in_order(redis_client, qs, ws):
    Queue(redis_client, settings=qs).enqueue_many([("t", None)] * (2 * CAP + 3))
    leases = []
    while len(leases) < 2 * CAP + 3:
        leases += [(job.id, job.lease) for job in scripts.run(
            redis_client, claim_op(qs, ws, worker_id="w1", max_jobs=2 * CAP + 3)).jobs]
    gone = leases[CAP + 1]
    scripts.run(redis_client, ack_op(qs, [gone], worker_id="w1"))
    redis_client.set(qs.keys.resource_lock("res"), "other:9")  # taken by another job
    ops = extend_lease_ops(qs, leases, lease_ms=30_000, worker_id="w1", registry_entry_json="{}",
                           registry_ttl_ms=10_000, kept_locks=[("res", "x:1")])
    assert [len(op.args) for op in ops] == [7 + 2 * CAP + 2, 7 + 2 * CAP, 7 + 2 * 3]
    result = merged([scripts.run(redis_client, op) for op in ops])
    assert result.held == [lease != gone for lease in leases]
    assert result.kept == [False]  # the kept lock is sent, and answered, once


def test_reaper_batches_past_luas_unpack_limit(redis_client, qs):
    expired = 8_500  # one ZREM of that many ids would exceed Lua's unpack limit
    Queue(redis_client, settings=qs).enqueue_many([("t", None)] * expired)
    short = WorkerSettings(visibility_timeout_s=1)
    while redis_client.llen(qs.keys.ready):
        scripts.run(redis_client, claim_op(qs, short, worker_id="w1", max_jobs=CAP))
    redis_client.zadd(qs.keys.processing, {job_id: 1 for job_id in
                                           redis_client.zrange(qs.keys.processing, 0, -1)})
    result = scripts.run(redis_client, reap_op(qs, limit=10_000, pass_lock_ms=0, holder="t"))
    assert (result.requeued, result.more) == (expired, False)
    assert redis_client.llen(qs.keys.ready) == expired


@pytest.mark.parametrize("by_id", [True, False], ids=["by-id", "oldest"])
def test_a_replay_goes_in_calls_of_half_the_cap(redis_client, qs, ws, by_id):
    """A replay unpacks each dead record back into a Hash, about five times a claim's Redis time
    per job: a call of the cap held Redis up to 25 ms with 20,000 dead letters."""
    queue = Queue(redis_client, settings=qs)
    queue.enqueue_many([("t", None)] * (CAP + 3))
    dead: list[str] = []
    while len(dead) < CAP + 3:
        for job in scripts.run(redis_client, claim_op(qs, ws, worker_id="w1",
                                                      max_jobs=CAP)).jobs:
            scripts.run(redis_client, fail_op(qs, (job.id, job.lease), error="boom",
                                              retry_delay_ms=None, worker_id="w1"))
            dead.append(job.id)
    assert queue.dead_count() == CAP + 3
    assert queue.replay(["not-dead"]) == []  # the script loaded: no NOSCRIPT round below
    before = script_calls(redis_client)
    replayed = queue.replay(dead) if by_id else queue.replay(limit=CAP + 3)
    assert sorted(replayed) == sorted(dead)
    # 203 jobs in calls of at most CAP // 2 = 100.
    assert script_calls(redis_client) - before == 3
    assert_invariants(redis_client, qs)


@pytest.mark.parametrize(("action", "calls_made"), [("replay", 3), ("purge", 2)])
def test_a_replay_or_purge_of_the_oldest_in_a_long_dead_letter_list_keeps_each_call_short(
        redis_client, qs, ws, action, calls_made):
    """Each call takes its letters with ZRANGEBYSCORE ... LIMIT and ZREM, O(log N) each, as the
    ZPOPMIN it replaced: 300 of 600 packed dead records replayed (purged) from a list of 200,000
    in 3 calls of 100 (2 of 200), twice, that stay far under the 20 ms a call may hold Redis. Measured twice,
    the quicker counted: the time inside Redis is wall time, which the suite's other processes
    stretch on a loaded machine (69 ms for 3 calls once, beside the Redis 6.2 run's workers; 8 to
    22 ms alone)."""
    queue = Queue(redis_client, settings=qs)
    queue.enqueue_many([("t", {"n": n}) for n in range(600)])
    while redis_client.llen(qs.keys.ready):
        for job in scripts.run(redis_client, claim_op(qs, ws, worker_id="w1", max_jobs=CAP)).jobs:
            scripts.run(redis_client, fail_op(qs, (job.id, job.lease), error="boom",
                                              retry_delay_ms=None, worker_id="w1"))
    newest = int(redis_client.zrange(qs.keys.dead, -1, -1, withscores=True)[0][1])
    pipe = redis_client.pipeline(transaction=False)
    for start in range(0, 200_000, 10_000):  # letters of jobs that died after those 600
        pipe.zadd(qs.keys.dead, {f"later-{i}": newest + 1 + i for i in range(start, start + 10_000)})
    pipe.execute()
    done = {"replay": lambda *args, **kwargs: len(queue.replay(*args, **kwargs)),
            "purge": queue.purge}[action]
    assert done(["not-dead"]) == 0  # the script loaded: no NOSCRIPT round below
    measured = []
    for _ in range(2):
        calls, usec = script_calls(redis_client), script_usec(redis_client)
        assert done(limit=300) == 300
        calls, usec = script_calls(redis_client) - calls, script_usec(redis_client) - usec
        assert calls == calls_made
        measured.append(usec)
    assert redis_client.zrange(qs.keys.dead, 0, 0) == ["later-0"]
    assert min(measured) < calls_made * 20_000, (
        f"{measured} us inside Redis for {calls_made} calls each")

