"""ack.lua: fencing by lease token, idempotency key marked done in the same step, done TTL, batching."""

from __future__ import annotations

import pytest
from antre.protocol import scripts
from antre.protocol.ack import ack_op
from antre.settings import QueueSettings
from invariants import assert_invariants
from protocol_state import dump, run_fresh, seed_job


def ack(r, qs, leases, *, fresh=False):
    op = ack_op(qs, leases, worker_id="w1")
    return run_fresh(r, op) if fresh else scripts.run(r, op)


def test_ack_settles_done_marks_key_and_frees_lock(redis_client, qs):
    seed_job(redis_client, qs, "a", status="processing", attempt=1, lease=3, idempotency_key="k",
             resource_key="acct")
    redis_client.set(qs.keys.idempotency("k"), "a", px=1000)
    assert ack(redis_client, qs, [("a", 3)]) == [True]
    state = dump(redis_client, qs)
    assert state == {
        "ready": [], "processing": [], "retry": [], "dead": [], "stats": {"done": 1},
        "locks": {}, "idem": {"k": "a|done"},
        "jobs": {"a": {
            "id": "a", "type": "t", "payload": "null", "status": "done", "outcome": "succeeded",
            "attempt": "1", "max_attempts": "5", "lease": "3", "schema_version": "1",
            "idempotency_key": "k", "resource_key": "acct", "events": "1", "history": ["acked"],
            "worker": "w1",
        }},
    }
    assert 0 < redis_client.pttl(qs.keys.job("a")) <= qs.done_ttl_s * 1000
    # The done marker outlives the enqueue TTL: it is set with idempotency_done_ttl.
    assert 1000 < redis_client.pttl(qs.keys.idempotency("k")) <= qs.idempotency_done_ttl_s * 1000
    assert_invariants(redis_client, qs)
    # Acking again with the same token (a retry whose reply was lost) reports the job acked and
    # changes nothing: no second "done" count, no second history entry.
    assert ack(redis_client, qs, [("a", 3)]) == [True]
    assert dump(redis_client, qs) == state


@pytest.mark.parametrize("seed", [
    pytest.param({"status": "processing", "lease": 4}, id="requeued-and-reclaimed"),
    pytest.param({"status": "queued", "lease": 3}, id="requeued-by-reaper"),
    pytest.param({"status": "retrying", "lease": 3}, id="failed-already"),
    pytest.param({"status": "dead", "lease": 3}, id="dead"),
])
def test_stale_token_is_rejected_and_changes_nothing(redis_client, qs, seed):
    seed_job(redis_client, qs, "a", attempt=1, resource_key="acct", idempotency_key="k", **seed)
    redis_client.set(qs.keys.idempotency("k"), "a")
    before = dump(redis_client, qs)
    assert ack(redis_client, qs, [("a", 3 if seed["status"] == "processing" else 2)]) == [False]
    assert dump(redis_client, qs) == before
    assert_invariants(redis_client, qs)


def test_unknown_job_is_not_acked(redis_client, qs):
    assert ack(redis_client, qs, [("ghost", 1)]) == [False]
    assert redis_client.dbsize() == 0


def test_batch_ack_reports_per_lease(redis_client, qs):
    seed_job(redis_client, qs, "a", status="processing", attempt=1, lease=1)
    seed_job(redis_client, qs, "b", status="processing", attempt=1, lease=2)
    seed_job(redis_client, qs, "c", status="processing", attempt=1, lease=1)
    assert ack(redis_client, qs, [("a", 1), ("b", 1), ("c", 1)], fresh=True) == [True, False, True]
    state = dump(redis_client, qs)
    assert state["processing"] == ["b"]
    assert {job_id: job["status"] for job_id, job in state["jobs"].items()} == {
        "a": "done", "b": "processing", "c": "done"}
    assert state["stats"] == {"done": 2}
    assert_invariants(redis_client, qs)


def test_done_ttl_zero_deletes_the_record_but_keeps_the_done_key(redis_client):
    qs = QueueSettings(name="q", done_ttl_s=0)
    seed_job(redis_client, qs, "a", status="processing", attempt=1, lease=1, idempotency_key="k")
    assert ack(redis_client, qs, [("a", 1)]) == [True]
    state = dump(redis_client, qs)
    assert state["jobs"] == {} and state["processing"] == []
    assert state["idem"] == {"k": "a|done"}
    assert_invariants(redis_client, qs)


def test_lock_held_by_someone_else_is_not_freed(redis_client, qs):
    seed_job(redis_client, qs, "a", status="processing", attempt=1, lease=1, resource_key="acct")
    redis_client.set(qs.keys.resource_lock("acct"), "b:1")  # e.g. after the lock expired
    seed_job(redis_client, qs, "b", status="processing", attempt=1, lease=1, resource_key="other")
    redis_client.delete(qs.keys.resource_lock("other"))
    assert ack(redis_client, qs, [("a", 1)]) == [True]
    assert redis_client.get(qs.keys.resource_lock("acct")) == "b:1"
