"""ack.lua: fencing by lease token, idempotency key marked done in the same step, done TTL, batching."""

from __future__ import annotations

import pytest
from antre import errors
from antre.client import Queue
from antre.protocol import scripts
from antre.protocol.ack import ack_op
from antre.protocol.claim import claim_op
from antre.protocol.fail import fail_op
from antre.settings import QueueSettings, WorkerSettings
from invariants import assert_invariants, read_record
from protocol_state import dump, last_attempt_with_a_waiter, outlive_lease, run_fresh, seed_job, server_ms


def ack(r, qs, leases, *, fresh=False):
    op = ack_op(qs, leases, worker_id="w1")
    return (run_fresh(r, op) if fresh else scripts.run(r, op)).held


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


def test_done_ttl_zero_keeps_no_record_but_the_done_key_and_a_stub_for_a_retried_ack(redis_client):
    """Issue 10.6: with done_ttl_s=0 a retried ack (its first reply lost) was reported as a lost
    lease. The record is gone but for a short-lived stub that answers the retry truthfully."""
    qs = QueueSettings(name="q", done_ttl_s=0)
    seed_job(redis_client, qs, "a", status="processing", attempt=1, lease=1, idempotency_key="k")
    op = ack_op(qs, [("a", 1)], worker_id="w1", retry_window_ms=5000)
    assert scripts.run(redis_client, op).held == [True]
    state = dump(redis_client, qs)
    assert state["jobs"] == {"a": {"status": "done", "outcome": "succeeded", "lease": "1",
                                   "worker": "w1", "history": []}}
    assert 0 < redis_client.pttl(qs.keys.job("a")) <= 5000
    assert state["processing"] == [] and state["idem"] == {"k": "a|done"}
    with pytest.raises(errors.JobNotFound):
        Queue(redis_client, settings=qs).get("a")  # nothing a reader would call a record
    assert scripts.run(redis_client, op).held == [True]  # the retry
    assert dump(redis_client, qs) == state
    assert_invariants(redis_client, qs)


def test_a_run_whose_lock_is_someone_elses_is_not_acked(redis_client, qs):
    """Issue 10.8: the lock expired (say during an outage) and another job took the resource:
    the two runs may have overlapped, so the late one does not count."""
    seed_job(redis_client, qs, "a", status="processing", attempt=1, lease=1, resource_key="acct")
    redis_client.set(qs.keys.resource_lock("acct"), "b:1")
    seed_job(redis_client, qs, "c", status="processing", attempt=1, lease=1, resource_key="other")
    redis_client.delete(qs.keys.resource_lock("other"))  # expired; nobody took it either
    before = dump(redis_client, qs)
    assert ack(redis_client, qs, [("a", 1), ("c", 1)]) == [False, False]
    assert dump(redis_client, qs) == before
    assert redis_client.get(qs.keys.resource_lock("acct")) == "b:1"


def test_a_lease_past_its_deadline_is_not_acked_and_the_job_runs_again(redis_client, qs):
    """Issue 10.8: a run whose lease deadline passed (no reaper pass yet) is not trusted: the ack
    treats the lease as the reaper would, and the job runs again with the attempt counted."""
    now = server_ms(redis_client)
    seed_job(redis_client, qs, "a", status="processing", attempt=1, lease=1, score_ms=now - 1,
             resource_key="acct")
    assert ack(redis_client, qs, [("a", 1)]) == [False]
    state = dump(redis_client, qs)
    assert state["ready"] == ["a"] and state["processing"] == [] and state["locks"] == {}
    job = state["jobs"]["a"]
    assert (job["status"], job["attempt"], job["history"]) == ("queued", "1", ["lease_expired"])
    assert state["stats"] == {"lease_expired": 1}
    assert_invariants(redis_client, qs)


@pytest.mark.parametrize("reaped_first", [
    pytest.param(False, id="ack-before-the-reaper"),
    pytest.param(True, id="ack-after-the-reaper-dead-lettered-it"),
])
def test_a_late_ack_of_a_last_attempt_ends_done_not_dead(redis_client, qs, reaped_first):
    """Issue 10, also decide: a job whose ack arrived after its last lease expired had finished;
    it ends done (not dead), and the dead letters do not keep it."""
    now = server_ms(redis_client)
    seed_job(redis_client, qs, "a", status="processing", attempt=5, max_attempts=5, lease=5,
             score_ms=now - 1, idempotency_key="k")
    redis_client.set(qs.keys.idempotency("k"), "a")
    if reaped_first:
        assert Queue(redis_client, settings=qs).reap().dead == 1
        assert dump(redis_client, qs)["dead"] == ["a"]
    assert ack(redis_client, qs, [("a", 5)]) == [True]
    state = dump(redis_client, qs)
    assert state["dead"] == state["processing"] == state["ready"] == []
    job = state["jobs"]["a"]
    assert (job["status"], job["outcome"]) == ("done", "succeeded")
    assert job["history"][-1] == "acked"
    assert "after its lease expired" in Queue(redis_client, settings=qs).get("a").history[-1].error
    assert state["idem"] == {"k": "a|done"}
    assert_invariants(redis_client, qs)


@pytest.mark.parametrize("done_ttl_s", [pytest.param(600, id="record-kept"),
                                        pytest.param(0, id="no-record-kept")])
def test_the_done_key_keeps_its_digest(redis_client, ws, done_ttl_s):
    """After the job succeeded its key still tells a retry (duplicate, returns the job) from
    another request reusing it (a conflict)."""
    qs = QueueSettings(name="q", done_ttl_s=done_ttl_s)
    queue = Queue(redis_client, settings=qs)
    job_id = queue.enqueue("t", {"n": 1}, idempotency_key="k").job_id
    digest = read_record(redis_client, qs, job_id).get("idempotency_digest")
    [job] = scripts.run(redis_client, claim_op(qs, ws, worker_id="w1", max_jobs=1)).jobs
    assert ack(redis_client, qs, [(job.id, job.lease)]) == [True]
    assert redis_client.get(qs.keys.idempotency("k")) == f"{job_id}|{digest}|done"
    assert queue.enqueue("t", {"n": 1}, idempotency_key="k").created is False
    with pytest.raises(errors.IdempotencyConflict):
        queue.enqueue("t", {"n": 2}, idempotency_key="k")


def test_the_ack_that_frees_a_resource_wakes_the_job_waiting_longest(redis_client, qs, ws):
    """Jobs deferred for a busy resource used to wait for their re-check (lock_defer_s) even
    when the run holding it ended at once: a line of short jobs on one resource ran about one
    per lock_defer_s. The ack that frees the lock now puts the longest-waiting job at the head
    of the queue; the others keep their place and their re-check."""
    claim = claim_op(qs, ws, worker_id="w1", max_jobs=1)
    seed_job(redis_client, qs, "a", resource_key="acct")
    [a] = scripts.run(redis_client, claim).jobs
    for job_id in ("b", "c", "d"):
        seed_job(redis_client, qs, job_id, resource_key="acct")
        assert scripts.run(redis_client, claim).jobs == []  # deferred: a holds acct
    assert redis_client.zrange(qs.keys.waiting_prefix + "acct", 0, -1) == ["b", "c", "d"]
    Queue(redis_client, settings=qs).cancel("b")  # no longer waits: passed over

    assert scripts.run(redis_client, ack_op(qs, [(a.id, a.lease)], worker_id="w1")).held == [True]
    assert redis_client.lrange(qs.keys.ready, -1, -1) == ["c"]  # the head of the line
    assert read_record(redis_client, qs, "c")["status"] == "queued"
    assert redis_client.zscore(qs.keys.retry, "c") is None
    assert read_record(redis_client, qs, "d")["status"] == "scheduled"
    assert redis_client.zscore(qs.keys.retry, "d") is not None
    assert_invariants(redis_client, qs)

    [c] = scripts.run(redis_client, claim_op(qs, ws, worker_id="w1", max_jobs=3)).jobs
    assert (c.id, c.attempt) == ("c", 1)
    assert scripts.run(redis_client, ack_op(qs, [(c.id, c.lease)], worker_id="w1")).held == [True]
    [d] = scripts.run(redis_client, claim).jobs
    assert d.id == "d"
    assert redis_client.zrange(qs.keys.waiting_prefix + "acct", 0, -1) == ["d"]  # running now
    scripts.run(redis_client, ack_op(qs, [(d.id, d.lease)], worker_id="w1"))
    assert not redis_client.exists(qs.keys.waiting_prefix + "acct")
    assert_invariants(redis_client, qs)


def test_a_late_ack_of_a_last_attempt_wakes_the_waiter_though_its_lock_expired(redis_client,
                                                                                qs):
    """A run on its last attempt that finishes after its lease ran out ends done: it succeeded,
    so it wakes the job waiting for its resource as any ack does. Its lock expired with the
    lease (the claim gives both one length), so there is nothing left to free; the resource is
    free all the same, and the waiter used to sit until its re-check (lock_defer_s, here 30 s)."""
    ws = WorkerSettings(visibility_timeout_s=1, lock_defer_s=30, lock_max_deferrals=3)
    a = last_attempt_with_a_waiter(redis_client, qs, ws, holder="a", waiter="b",
                                   holder_worker="w1", waiter_worker="w1")
    outlive_lease(redis_client, qs, "a")  # the run outlives its lease (an outage, say)
    assert redis_client.get(qs.keys.resource_lock("acct")) is None

    assert scripts.run(redis_client, ack_op(qs, [(a.id, a.lease)], worker_id="w1")).held == [True]
    assert read_record(redis_client, qs, "a")["status"] == "done"
    assert redis_client.lrange(qs.keys.ready, 0, -1) == ["b"]
    [b] = scripts.run(redis_client, claim_op(qs, ws, worker_id="w1", max_jobs=1)).jobs
    assert b.id == "b"
    assert_invariants(redis_client, qs)


def test_a_late_ack_wakes_nobody_when_the_resource_went_to_another_job(redis_client, qs, ws):
    seed_job(redis_client, qs, "a", max_attempts=1, resource_key="acct")
    [a] = scripts.run(redis_client, claim_op(qs, ws, worker_id="w1", max_jobs=1)).jobs
    seed_job(redis_client, qs, "b", resource_key="acct")
    assert scripts.run(redis_client, claim_op(qs, ws, worker_id="w1", max_jobs=1)).jobs == []
    redis_client.zadd(qs.keys.processing, {"a": server_ms(redis_client) - 1})  # expired
    redis_client.set(qs.keys.resource_lock("acct"), "other:1", px=30_000)  # taken since

    assert scripts.run(redis_client, ack_op(qs, [(a.id, a.lease)], worker_id="w1")).held == [True]
    assert redis_client.lrange(qs.keys.ready, 0, -1) == []
    assert read_record(redis_client, qs, "b")["status"] == "scheduled"
    assert redis_client.get(qs.keys.resource_lock("acct")) == "other:1"


def test_a_waiter_retrying_after_a_failure_keeps_its_backoff(redis_client, qs, ws):
    """Only a job deferred for the resource is woken: one that ran since and now waits out the
    backoff of a failure is left where it is."""
    claim = claim_op(qs, ws, worker_id="w1", max_jobs=1)
    seed_job(redis_client, qs, "a", resource_key="acct")
    [a] = scripts.run(redis_client, claim).jobs
    seed_job(redis_client, qs, "b", resource_key="acct")
    assert scripts.run(redis_client, claim).jobs == []
    # a finishes, b runs and fails with a minute's backoff; a new job takes the resource.
    scripts.run(redis_client, ack_op(qs, [(a.id, a.lease)], worker_id="w1"))
    [b] = scripts.run(redis_client, claim).jobs
    scripts.run(redis_client, fail_op(qs, (b.id, b.lease), error="x", retry_delay_ms=60_000,
                                      worker_id="w1"))
    seed_job(redis_client, qs, "e", resource_key="acct")
    [e] = scripts.run(redis_client, claim).jobs
    redis_client.zadd(qs.keys.waiting_prefix + "acct", {"b": 0})  # a stale entry at the front
    scripts.run(redis_client, ack_op(qs, [(e.id, e.lease)], worker_id="w1"))
    assert read_record(redis_client, qs, "b")["status"] == "retrying"
    assert redis_client.zscore(qs.keys.retry, "b") > server_ms(redis_client) + 50_000
    assert redis_client.lrange(qs.keys.ready, 0, -1) == []
    assert_invariants(redis_client, qs)


def test_a_failure_that_frees_a_resource_wakes_the_next_job_too(redis_client, qs, ws):
    """A failed run frees its lock as an ack does (unless it keeps it for a thread still
    going): the job waiting for the resource runs next, the failed one after its backoff."""
    claim = claim_op(qs, ws, worker_id="w1", max_jobs=1)
    seed_job(redis_client, qs, "a", resource_key="acct")
    [a] = scripts.run(redis_client, claim).jobs
    seed_job(redis_client, qs, "b", resource_key="acct")
    assert scripts.run(redis_client, claim).jobs == []  # deferred
    scripts.run(redis_client, fail_op(qs, (a.id, a.lease), error="x", retry_delay_ms=60_000,
                                      worker_id="w1"))
    assert redis_client.lrange(qs.keys.ready, -1, -1) == ["b"]
    [b] = scripts.run(redis_client, claim).jobs
    assert b.id == "b" and read_record(redis_client, qs, "a")["status"] == "retrying"
    # Kept for a thread still going: nothing is woken, the lock is not free.
    seed_job(redis_client, qs, "c", resource_key="acct")
    assert scripts.run(redis_client, claim).jobs == []
    scripts.run(redis_client, fail_op(qs, (b.id, b.lease), error="timed out", retry_delay_ms=0,
                                      worker_id="w1", keep_lock=True))
    assert read_record(redis_client, qs, "c")["status"] == "scheduled"
    assert_invariants(redis_client, qs)


def test_an_ack_drops_a_bounded_number_of_stale_waiters_and_the_next_goes_on(redis_client, qs,
                                                                             ws):
    """Review finding: the wake walked every stale entry of waiting:<resource> in one call (jobs
    cancelled or gone since they waited); 50,000 of them held Redis 421 ms for one ack. A call
    now drops at most 100 (WAKE_SCAN_LIMIT in _prelude.lua) and the next one goes on."""
    waiting = qs.keys.waiting_prefix + "acct"
    redis_client.zadd(waiting, {f"gone-{n}": n for n in range(250)})
    seed_job(redis_client, qs, "w", resource_key="acct", status="scheduled",
             score_ms=server_ms(redis_client) + 60_000)
    redis_client.zadd(waiting, {"w": 10**15})  # a real waiter, behind the stale entries

    def run_and_ack(job_id: str) -> None:
        seed_job(redis_client, qs, job_id, status="processing", attempt=1, lease=1,
                 resource_key="acct")
        assert scripts.run(redis_client, ack_op(qs, [(job_id, 1)], worker_id="w1")).held == [True]

    run_and_ack("a")
    assert redis_client.zcard(waiting) == 151 and redis_client.llen(qs.keys.ready) == 0
    run_and_ack("b")
    assert redis_client.zcard(waiting) == 51
    run_and_ack("c")
    assert redis_client.zrange(waiting, 0, -1) == ["w"]
    assert redis_client.lrange(qs.keys.ready, 0, -1) == ["w"]  # woken
    assert read_record(redis_client, qs, "w")["status"] == "queued"
