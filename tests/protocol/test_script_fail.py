"""fail.lua: retry with a due time, dead at max_attempts, permanent failures, fencing."""

from __future__ import annotations

import pytest
from antre import errors
from antre.protocol import scripts
from antre.protocol.fail import fail_op
from invariants import assert_invariants, read_record
from protocol_state import dump, run_fresh, seed_job, server_ms


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


def test_second_fail_with_the_same_token_is_refused(redis_client, qs):
    seed_job(redis_client, qs, "a", status="processing", attempt=1, lease=1)
    fail(redis_client, qs, ("a", 1), delay_ms=1000)
    state = dump(redis_client, qs)
    with pytest.raises(errors.LeaseLost):
        fail(redis_client, qs, ("a", 1), delay_ms=1000)
    assert dump(redis_client, qs) == state


def test_long_errors_are_truncated(redis_client, qs):
    seed_job(redis_client, qs, "a", status="processing", attempt=1, lease=1)
    fail(redis_client, qs, ("a", 1), delay_ms=None, error="x" * 10_000)
    assert len(read_record(redis_client, qs, "a").get("last_error")) == 4000
