"""release.lua: give leased jobs back to the head of the queue with the attempt refunded."""

from __future__ import annotations

from antre.protocol import scripts
from antre.protocol.claim import claim_op
from antre.protocol.release import release_op
from invariants import assert_invariants
from protocol_state import dump, run_fresh, seed_job


def release(r, qs, leases, *, fresh=False):
    op = release_op(qs, leases, worker_id="w1", reason="worker shutting down")
    return run_fresh(r, op) if fresh else scripts.run(r, op)


def test_release_refunds_attempt_and_puts_job_at_the_head(redis_client, qs, ws):
    seed_job(redis_client, qs, "waiting")
    seed_job(redis_client, qs, "a", status="processing", attempt=2, lease=2, resource_key="acct")
    seed_job(redis_client, qs, "b", status="processing", attempt=1, lease=5)
    assert release(redis_client, qs, [("a", 2), ("b", 4)], fresh=True) == [True, False]
    state = dump(redis_client, qs)
    assert state["ready"] == ["waiting", "a"]  # the right end is claimed next
    assert state["processing"] == ["b"]
    assert state["locks"] == {}
    job = state["jobs"]["a"]
    assert (job["status"], job["attempt"], job["lease"]) == ("queued", "1", "2")
    assert job["history"] == ["released"]
    assert state["jobs"]["b"]["status"] == "processing"
    assert state["stats"] == {"released": 1}
    assert_invariants(redis_client, qs)
    # Rerun: the token is stale now, nothing changes.
    assert release(redis_client, qs, [("a", 2)]) == [False]
    assert dump(redis_client, qs) == state
    # Next claim takes the released job first, with the same attempt number as before.
    claimed = scripts.run(redis_client, claim_op(qs, ws, worker_id="w2", max_jobs=1)).jobs
    assert [(j.id, j.attempt, j.lease) for j in claimed] == [("a", 2, 3)]
    assert_invariants(redis_client, qs)
