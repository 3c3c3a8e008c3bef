"""fail.lua: retry with a due time, dead at max_attempts, permanent failures, fencing."""

from __future__ import annotations

import pytest
from antre import errors
from antre.protocol import scripts
from antre.protocol.claim import claim_op
from antre.protocol.fail import fail_op
from antre.protocol.unlock import unlock_op
from invariants import assert_invariants, read_record
from protocol_state import dump, history, run_fresh, seed_job, server_ms


def fail(r, qs, lease, *, delay_ms, error="boom", fresh=False):
    op = fail_op(qs, lease, error=error, retry_delay_ms=delay_ms, worker_id="w1")
    return run_fresh(r, op) if fresh else scripts.run(r, op)


@pytest.mark.parametrize(("attempt", "max_attempts", "delay_ms", "want"), [
    pytest.param(1, 3, 5000, "retrying", id="retry-with-delay"),
    pytest.param(2, 3, 0, "retrying", id="retry-now"),
    pytest.param(3, 3, 5000, "dead", id="out-of-attempts"),
    pytest.param(1, 3, None, "dead", id="permanent"),
])
def test_fail_outcomes(redis_client, qs, attempt, max_attempts, delay_ms, want):
    seed_job(redis_client, qs, "a", status="processing", attempt=attempt, max_attempts=max_attempts,
             lease=attempt, resource_key="acct")
    before = server_ms(redis_client)
    result = fail(redis_client, qs, ("a", attempt), delay_ms=delay_ms, fresh=True)
    after = server_ms(redis_client)
    assert result.outcome == want
    state = dump(redis_client, qs)
    job = state["jobs"]["a"]
    assert (job["status"], job["attempt"], job["last_error"]) == (want, str(attempt), "boom")
    assert state["processing"] == [] and state["locks"] == {} and state["ready"] == []
    if want == "retrying":
        assert state["retry"] == ["a"] and state["dead"] == []
        assert before + delay_ms <= result.at_ms <= after + delay_ms
        assert redis_client.zscore(qs.keys.retry, "a") == result.at_ms
        assert state["stats"] == {"retried": 1}
        assert job["history"] == ["retrying"]
    else:
        assert state["dead"] == ["a"] and state["retry"] == []
        assert before <= result.at_ms <= after
        assert state["stats"] == {"dead": 1}
        assert job["history"] == ["dead"]
    assert redis_client.ttl(qs.keys.job("a")) == -1
    assert_invariants(redis_client, qs)


def test_stale_token_raises_lease_lost_and_changes_nothing(redis_client, qs):
    seed_job(redis_client, qs, "a", status="processing", attempt=2, lease=2, resource_key="acct")
    before = dump(redis_client, qs)
    with pytest.raises(errors.LeaseLost, match="job a lease 1"):
        fail(redis_client, qs, ("a", 1), delay_ms=0)
    assert dump(redis_client, qs) == before
    assert_invariants(redis_client, qs)


def test_another_fail_with_the_same_token_is_refused(redis_client, qs):
    seed_job(redis_client, qs, "a", status="processing", attempt=1, lease=1)
    fail(redis_client, qs, ("a", 1), delay_ms=1000)
    state = dump(redis_client, qs)
    with pytest.raises(errors.LeaseLost):
        fail(redis_client, qs, ("a", 1), delay_ms=1000, error="another failure")
    assert dump(redis_client, qs) == state


def fail_op_of(qs, lease, *, keep_lock, delay_ms=1000, error="timed out", worker="w1"):
    return fail_op(qs, lease, error=error, retry_delay_ms=delay_ms, worker_id=worker,
                   keep_lock=keep_lock)


@pytest.mark.parametrize(("attempt", "delay_ms", "keep_lock", "resource"), [
    pytest.param(1, 1000, True, "acct", id="retrying-lock-kept"),
    pytest.param(3, 1000, True, "acct", id="dead-packed-lock-kept"),
    pytest.param(1, 0, False, "acct", id="retrying-lock-freed"),
    pytest.param(1, None, False, None, id="permanent-no-resource"),
    pytest.param(2, 1000, True, None, id="kept-without-a-resource"),
])
def test_a_fail_sent_again_after_its_reply_was_lost_gets_the_first_reply(
        redis_client, qs, attempt, delay_ms, keep_lock, resource):
    """Outages.settle sends a fail again after a connection error: its first sending may have
    run. Refused (ANTRE_NOT_LEASE_HOLDER), the worker never learnt that it keeps the lock of a
    thread still running, stopped extending it, and the resource's next job ran beside it."""
    seed_job(redis_client, qs, "a", status="processing", attempt=attempt, max_attempts=3,
             lease=attempt, resource_key=resource)
    op = fail_op_of(qs, ("a", attempt), keep_lock=keep_lock, delay_ms=delay_ms)
    first = scripts.run(redis_client, op)
    state = dump(redis_client, qs)
    assert scripts.run(redis_client, op) == first
    assert dump(redis_client, qs) == state
    assert first.outcome == ("dead" if attempt == 3 or delay_ms is None else "retrying")
    if first.outcome == "dead":
        assert redis_client.type(qs.keys.job("a")) == "string"  # answered from a packed record
        assert state["jobs"]["a"].get("lock_kept") == ("3" if resource else None)


def test_a_fail_sent_again_is_answered_while_its_retry_waits_for_the_lock_it_kept(
        redis_client, qs, ws):
    """The retry fell due before the call was sent again (a long outage on this worker's side
    only): another worker's claim promoted it and found the resource locked by the kept lock."""
    seed_job(redis_client, qs, "a", status="processing", attempt=1, lease=1, resource_key="acct")
    op = fail_op_of(qs, ("a", 1), keep_lock=True, delay_ms=0)
    first = scripts.run(redis_client, op)
    for _ in range(2):
        redis_client.zadd(qs.keys.retry, {"a": 0})  # due again at once
        assert scripts.run(redis_client, claim_op(qs, ws, worker_id="w2", max_jobs=1)).jobs == []
    assert history(read_record(redis_client, qs, "a"))[-2:] == ["deferred", "deferred"]
    state = dump(redis_client, qs)
    assert scripts.run(redis_client, op) == first
    assert dump(redis_client, qs) == state


def test_only_the_same_call_of_the_same_run_is_answered_again(redis_client, qs, ws):
    """Another worker (the lease counter repeated after a failover), another call of the same
    run (another error, or the lock kept where the call freed it), or the job claimed again
    since: refused as before, nothing changed."""
    seed_job(redis_client, qs, "a", status="processing", attempt=1, lease=1, resource_key="acct")
    op = fail_op_of(qs, ("a", 1), keep_lock=True)
    first = scripts.run(redis_client, op)
    state = dump(redis_client, qs)
    for other in (fail_op_of(qs, ("a", 1), keep_lock=True, worker="w2"),
                  fail_op_of(qs, ("a", 1), keep_lock=True, error="another error"),
                  fail_op_of(qs, ("a", 1), keep_lock=False)):
        with pytest.raises(errors.LeaseLost):
            scripts.run(redis_client, other)
        assert dump(redis_client, qs) == state
    assert scripts.run(redis_client, op) == first
    # The thread returned (its unlock), the retry ran and failed again: a later lease.
    assert scripts.run(redis_client, unlock_op(qs, ("a", 1), resource_key="acct")) is True
    redis_client.zadd(qs.keys.retry, {"a": 0})
    [again] = scripts.run(redis_client, claim_op(qs, ws, worker_id="w1", max_jobs=1)).jobs
    scripts.run(redis_client, fail_op_of(qs, ("a", again.lease), keep_lock=True))
    with pytest.raises(errors.LeaseLost):
        scripts.run(redis_client, op)


def test_long_errors_are_truncated(redis_client, qs):
    seed_job(redis_client, qs, "a", status="processing", attempt=1, lease=1)
    fail(redis_client, qs, ("a", 1), delay_ms=None, error="x" * 10_000)
    assert len(read_record(redis_client, qs, "a").get("last_error")) == 4000
