"""extend_lease.lua: heartbeats push deadlines forward only (ZADD GT), report lost leases, keep
resource locks and refresh the worker registry."""

from __future__ import annotations

import json

import pytest
from antre.protocol import scripts
from antre.protocol.claim import claim_op
from antre.protocol.extend_lease import extend_lease_op
from antre.protocol.fail import fail_op
from antre.protocol.unlock import unlock_op
from invariants import assert_invariants, read_record
from protocol_state import dump, run_fresh, seed_job, server_ms


def extend(r, qs, leases, *, lease_ms=10_000, fresh=False, kept_locks=()):
    op = extend_lease_op(qs, leases, lease_ms=lease_ms, worker_id="w1",
                   registry_entry_json=json.dumps({"pod": "p"}), registry_ttl_ms=15_000,
                   kept_locks=kept_locks)
    return run_fresh(r, op) if fresh else scripts.run(r, op)


def test_extend_moves_deadline_forward_and_refreshes_registry(redis_client, qs):
    now = server_ms(redis_client)
    seed_job(redis_client, qs, "a", status="processing", attempt=1, lease=1, score_ms=now + 100,
             resource_key="acct")
    redis_client.pexpire(qs.keys.resource_lock("acct"), 100)
    result = extend(redis_client, qs, [("a", 1)], fresh=True)
    assert result.held == [True]
    assert result.now_ms + 10_000 == redis_client.zscore(qs.keys.processing, "a")
    assert 5_000 < redis_client.pttl(qs.keys.resource_lock("acct")) <= 10_000
    state = dump(redis_client, qs)
    assert state["jobs"]["a"]["history"] == ["extended"]
    assert state["locks"] == {"acct": "a:1"}
    assert json.loads(redis_client.get(qs.keys.worker("w1"))) == {"pod": "p"}
    assert 0 < redis_client.pttl(qs.keys.worker("w1")) <= 15_000
    assert redis_client.zscore(qs.keys.workers, "w1") == result.now_ms
    assert_invariants(redis_client, qs)


def test_extend_never_moves_a_deadline_backwards(redis_client, qs):
    far = server_ms(redis_client) + 120_000
    seed_job(redis_client, qs, "a", status="processing", attempt=1, lease=1, score_ms=far,
             resource_key="acct")
    redis_client.pexpire(qs.keys.resource_lock("acct"), 120_000)
    assert extend(redis_client, qs, [("a", 1)], lease_ms=1000).held == [True]
    assert redis_client.zscore(qs.keys.processing, "a") == far
    assert redis_client.pttl(qs.keys.resource_lock("acct")) > 60_000  # PEXPIRE GT too


def test_extend_reports_lost_leases_and_changes_them_not(redis_client, qs):
    now = server_ms(redis_client)
    seed_job(redis_client, qs, "requeued", status="queued", attempt=1, lease=1)
    seed_job(redis_client, qs, "reclaimed", status="processing", attempt=2, lease=2, score_ms=now + 500)
    seed_job(redis_client, qs, "kept", status="processing", attempt=1, lease=1, score_ms=now + 500)
    before = dump(redis_client, qs)
    result = extend(redis_client, qs, [("requeued", 1), ("reclaimed", 1), ("kept", 1), ("gone", 1)])
    assert result.held == [False, False, True, False]
    after = dump(redis_client, qs)
    assert after["jobs"]["reclaimed"] == before["jobs"]["reclaimed"]
    assert after["jobs"]["requeued"] == before["jobs"]["requeued"]
    assert redis_client.zscore(qs.keys.processing, "reclaimed") == now + 500
    assert "gone" not in after["jobs"]
    assert_invariants(redis_client, qs)


def test_lock_taken_by_another_job_means_the_lease_is_lost(redis_client, qs):
    seed_job(redis_client, qs, "a", status="processing", attempt=1, lease=1, resource_key="acct")
    redis_client.set(qs.keys.resource_lock("acct"), "b:1")
    assert extend(redis_client, qs, [("a", 1)]).held == [False]
    assert redis_client.get(qs.keys.resource_lock("acct")) == "b:1"


def test_expired_lock_nobody_took_is_taken_back(redis_client, qs):
    seed_job(redis_client, qs, "a", status="processing", attempt=1, lease=1, resource_key="acct")
    redis_client.delete(qs.keys.resource_lock("acct"))
    assert extend(redis_client, qs, [("a", 1)]).held == [True]
    assert redis_client.get(qs.keys.resource_lock("acct")) == "a:1"
    assert_invariants(redis_client, qs)


def keep_lock_of_a_timed_out_run(r, qs, ws, *, max_attempts):
    """Claims job "a" on resource "res" and fails it keeping the lock, as a worker does for a
    handler thread past its timeout. Returns the run's lease."""
    seed_job(r, qs, "a", resource_key="res", max_attempts=max_attempts)
    [job] = scripts.run(r, claim_op(qs, ws, worker_id="w1", max_jobs=1)).jobs
    scripts.run(r, fail_op(qs, (job.id, job.lease), error="timed out", retry_delay_ms=0,
                           worker_id="w1", keep_lock=True))
    return (job.id, job.lease)


@pytest.mark.parametrize("max_attempts, form", [(2, "hash"), (1, "string")],
                         ids=["retrying record", "dead record, packed"])
def test_a_beat_that_arrives_after_the_unlock_leaves_the_lock_free(redis_client, qs, ws,
                                                                    max_attempts, form):
    """A beat names the locks kept for threads still running when it leaves; the thread can
    return, and its unlock free the lock, before the beat reaches Redis. That beat must not lock
    the resource again: nothing would free it before it expired, and every job on the resource
    would wait a whole lease for a run that is over."""
    lease = keep_lock_of_a_timed_out_run(redis_client, qs, ws, max_attempts=max_attempts)
    lock, kept = qs.keys.resource_lock("res"), [("res", f"a:{lease[1]}")]
    assert redis_client.type(qs.keys.job("a")) == form
    # While the thread runs, a kept lock that expired (its worker beat too late) is taken back.
    redis_client.delete(lock)
    assert extend(redis_client, qs, [], kept_locks=kept).kept == [True]
    assert redis_client.get(lock) == f"a:{lease[1]}"

    assert scripts.run(redis_client, unlock_op(qs, lease, resource_key="res")) is True
    assert "lock_kept" not in read_record(redis_client, qs, "a")
    assert redis_client.type(qs.keys.job("a")) == form
    assert extend(redis_client, qs, [], kept_locks=kept).kept == [False]
    assert not redis_client.exists(lock)
    assert_invariants(redis_client, qs)


def test_an_unlock_forgets_the_kept_lock_even_when_another_job_holds_it(redis_client, qs, ws):
    """The kept lock expired and another job took the resource; then the thread returned. Its
    unlock frees nothing, but a late beat must not take the lock once that other job is done."""
    lease = keep_lock_of_a_timed_out_run(redis_client, qs, ws, max_attempts=2)
    lock = qs.keys.resource_lock("res")
    redis_client.set(lock, "b:1", px=30_000)
    assert scripts.run(redis_client, unlock_op(qs, lease, resource_key="res")) is False
    assert redis_client.get(lock) == "b:1"
    assert "lock_kept" not in read_record(redis_client, qs, "a")
    redis_client.delete(lock)  # b's run is over
    assert extend(redis_client, qs, [], kept_locks=[("res", f"a:{lease[1]}")]).kept == [False]
    assert not redis_client.exists(lock)


def test_an_unlock_that_frees_the_lock_wakes_the_job_waiting_for_it(redis_client, qs, ws):
    """A job deferred for the resource used to wait for its re-check (lock_defer_s) after the
    kept lock was freed; the unlock now wakes it, as an ack does."""
    lease = keep_lock_of_a_timed_out_run(redis_client, qs, ws, max_attempts=1)
    seed_job(redis_client, qs, "b", resource_key="res")
    assert scripts.run(redis_client, claim_op(qs, ws, worker_id="w1", max_jobs=1)).jobs == []
    assert read_record(redis_client, qs, "b")["status"] == "scheduled"  # waits for res

    assert scripts.run(redis_client, unlock_op(qs, lease, resource_key="res")) is True
    assert redis_client.lrange(qs.keys.ready, -1, -1) == ["b"]
    assert read_record(redis_client, qs, "b")["status"] == "queued"
    [b] = scripts.run(redis_client, claim_op(qs, ws, worker_id="w1", max_jobs=1)).jobs
    assert (b.id, b.attempt) == ("b", 1)
    assert_invariants(redis_client, qs)
