"""claim.lua: batch leases, due promotion, done-key duplicates, resource-lock deferral and its bound."""

from __future__ import annotations

import pytest
from antre.client import Queue
from antre.heartbeat import registry_ttl_ms
from antre.protocol import scripts
from antre.protocol.claim import claim_op
from antre.protocol.enqueue import EnqueueCalls
from antre.protocol.fail import fail_op
from antre.protocol.reap import reap_op
from antre.settings import QueueSettings, WorkerSettings
from invariants import assert_invariants, read_record
from protocol_state import dump, run_fresh, seed_job, server_ms
from registered_workers import register_worker


def claim(r, qs, ws, *, max_jobs=10, worker="w1", fresh=False):
    op = claim_op(qs, ws, worker_id=worker, max_jobs=max_jobs)
    return run_fresh(r, op) if fresh else scripts.run(r, op)


def test_batch_claim_leases_oldest_first(redis_client, qs, ws):
    for job_id in ("a", "b", "c"):
        seed_job(redis_client, qs, job_id, payload={"id": job_id}, idempotency_key=f"k-{job_id}")
    before = server_ms(redis_client)
    result = claim(redis_client, qs, ws, max_jobs=2)
    after = server_ms(redis_client)
    assert [(j.id, j.attempt, j.lease, j.payload_json, j.idempotency_key) for j in result.jobs] == [
        ("a", 1, 1, '{"id": "a"}', "k-a"), ("b", 1, 1, '{"id": "b"}', "k-b")]
    state = dump(redis_client, qs)
    assert state["ready"] == ["c"]
    assert state["processing"] == ["a", "b"]
    for job_id in ("a", "b"):
        deadline = redis_client.zscore(qs.keys.processing, job_id)
        assert before + ws.lease_ms <= deadline <= after + ws.lease_ms
        job = state["jobs"][job_id]
        assert (job["status"], job["attempt"], job["lease"], job["worker"]) == ("processing", "1", "1", "w1")
        assert job["history"] == ["claimed"]
    assert state["jobs"]["c"]["status"] == "queued"
    assert state["stats"] == {}
    assert_invariants(redis_client, qs)


def test_claim_after_script_flush_reloads(redis_client, qs, ws):
    seed_job(redis_client, qs, "a")
    result = claim(redis_client, qs, ws, fresh=True)
    assert [j.id for j in result.jobs] == ["a"]
    assert_invariants(redis_client, qs)


@pytest.mark.parametrize(("retry", "want_due"), [
    pytest.param({}, None, id="nothing-scheduled"),
    pytest.param({"later": 60_000, "sooner": 10_000}, 10_000, id="next-due-is-earliest"),
])
def test_empty_claim_reports_next_due(redis_client, qs, ws, retry, want_due):
    now = server_ms(redis_client)
    for job_id, offset in retry.items():
        seed_job(redis_client, qs, job_id, status="scheduled", score_ms=now + offset)
    before = dump(redis_client, qs)
    result = claim(redis_client, qs, ws)
    assert result.jobs == []
    if want_due is None:
        assert result.next_due_ms is None
    else:
        assert result.next_due_ms == now + want_due
        assert result.now_ms is not None and now <= result.now_ms < now + want_due
    assert dump(redis_client, qs) == before  # an empty claim changes nothing
    assert_invariants(redis_client, qs)


def test_claim_that_leases_reports_next_due_too(redis_client, qs, ws):
    # A worker that got fewer jobs than it asked for waits next; it must know when the next
    # scheduled job is due, or that job would wait a whole idle period.
    now = server_ms(redis_client)
    seed_job(redis_client, qs, "ready")
    seed_job(redis_client, qs, "later", status="scheduled", score_ms=now + 10_000)
    result = claim(redis_client, qs, ws)
    assert [j.id for j in result.jobs] == ["ready"]
    assert result.next_due_ms == now + 10_000
    assert_invariants(redis_client, qs)


def test_claim_promotes_due_retries_before_popping(redis_client, qs, ws):
    now = server_ms(redis_client)
    seed_job(redis_client, qs, "due", status="retrying", attempt=1, lease=1, score_ms=now - 10)
    seed_job(redis_client, qs, "later", status="retrying", attempt=1, lease=1, score_ms=now + 60_000)
    seed_job(redis_client, qs, "fresh")
    result = claim(redis_client, qs, ws, max_jobs=1)
    # A due retry goes to the head: it has waited already.
    assert [(j.id, j.attempt, j.lease) for j in result.jobs] == [("due", 2, 2)]
    state = dump(redis_client, qs)
    assert state["ready"] == ["fresh"]
    assert state["retry"] == ["later"]
    assert state["processing"] == ["due"]
    assert state["jobs"]["later"]["status"] == "retrying"
    assert_invariants(redis_client, qs)


def test_job_whose_key_is_done_is_settled_as_duplicate(redis_client, qs, ws):
    seed_job(redis_client, qs, "dup", idempotency_key="order-1")
    redis_client.set(qs.keys.idempotency("order-1"), "first|done")
    result = claim(redis_client, qs, ws)
    # Reported, so the worker logs it, and the worker claims again at once.
    assert result.jobs == [] and [(d.id, d.idempotency_key) for d in result.duplicates] == [
        ("dup", "order-1")]
    state = dump(redis_client, qs)
    assert state["ready"] == state["processing"] == state["retry"] == state["dead"] == []
    job = state["jobs"]["dup"]
    assert (job["status"], job["outcome"], job["attempt"], job["lease"]) == ("done", "duplicate", "0", "0")
    assert job["history"] == ["duplicate"]
    assert state["stats"] == {"duplicate": 1}
    assert state["idem"] == {"order-1": "first|done"}
    assert 0 < redis_client.pttl(qs.keys.job("dup")) <= qs.done_ttl_s * 1000
    assert_invariants(redis_client, qs)


def test_duplicate_beside_a_runnable_job(redis_client, qs, ws):
    seed_job(redis_client, qs, "dup", idempotency_key="k")
    seed_job(redis_client, qs, "run", idempotency_key="other")
    redis_client.set(qs.keys.idempotency("k"), "x|done")
    redis_client.set(qs.keys.idempotency("other"), "run")  # live but not done: runs
    result = claim(redis_client, qs, ws)
    assert [j.id for j in result.jobs] == ["run"]
    assert dump(redis_client, qs)["jobs"]["dup"]["status"] == "done"
    assert_invariants(redis_client, qs)


def test_free_resource_is_locked_with_the_lease_token(redis_client, qs, ws):
    seed_job(redis_client, qs, "a", resource_key="acct")
    result = claim(redis_client, qs, ws)
    assert [(j.id, j.resource_key) for j in result.jobs] == [("a", "acct")]
    assert dump(redis_client, qs)["locks"] == {"acct": "a:1"}
    assert 0 < redis_client.pttl(qs.keys.resource_lock("acct")) <= ws.lease_ms
    assert_invariants(redis_client, qs)


def test_busy_resource_defers_without_spending_an_attempt(redis_client, qs, ws):
    seed_job(redis_client, qs, "holder", status="processing", attempt=1, lease=1, resource_key="acct")
    seed_job(redis_client, qs, "waiter", attempt=1, lease=2, resource_key="acct")
    before = server_ms(redis_client)
    result = claim(redis_client, qs, ws)
    after = server_ms(redis_client)
    assert result.jobs == []
    state = dump(redis_client, qs)
    assert state["ready"] == [] and state["retry"] == ["waiter"]
    assert state["processing"] == ["holder"]
    job = state["jobs"]["waiter"]
    assert (job["status"], job["attempt"], job["lease"]) == ("scheduled", "1", "2")
    assert job["lock_deferrals"] == "1"
    assert job["history"] == ["deferred"]
    due = redis_client.zscore(qs.keys.retry, "waiter")
    assert before + 2000 <= due <= after + 2000  # lock_defer_s
    assert state["locks"] == {"acct": "holder:1"}
    assert state["stats"] == {"lock_deferred": 1}
    assert_invariants(redis_client, qs)


def test_busy_resource_past_the_deferral_bound_goes_dead(redis_client, qs, ws):
    seed_job(redis_client, qs, "holder", status="processing", attempt=1, lease=1, resource_key="acct")
    seed_job(redis_client, qs, "waiter", resource_key="acct", lock_deferrals=ws.lock_max_deferrals)
    claim(redis_client, qs, ws)
    state = dump(redis_client, qs)
    assert state["dead"] == ["waiter"] and state["retry"] == []
    job = state["jobs"]["waiter"]
    assert job["status"] == "dead" and job["attempt"] == "0"
    assert job["last_error"] == "resource acct stayed locked through 3 deferrals"
    assert state["stats"] == {"dead": 1}
    assert_invariants(redis_client, qs)


def test_deferred_job_runs_once_the_resource_is_free(redis_client, qs, ws):
    seed_job(redis_client, qs, "waiter", resource_key="acct", status="scheduled", lock_deferrals=2)
    result = claim(redis_client, qs, ws)  # due now: promoted, lock free, claimed
    assert [(j.id, j.attempt) for j in result.jobs] == [("waiter", 1)]
    assert dump(redis_client, qs)["locks"] == {"acct": "waiter:1"}
    assert_invariants(redis_client, qs)


def test_the_deferral_bound_is_per_wait_not_over_the_jobs_life(redis_client, qs, ws):
    """Issue 10, also decide: lock_deferrals counted over the job's whole life, so a job that
    waited on attempt 1 and again after a retry was dead-lettered early. Running resets it."""
    seed_job(redis_client, qs, "a", resource_key="acct", status="scheduled",
             lock_deferrals=ws.lock_max_deferrals)
    [job] = claim(redis_client, qs, ws).jobs
    assert read_record(redis_client, qs, "a").get("lock_deferrals") == "0"
    scripts.run(redis_client, fail_op(qs, (job.id, job.lease), error="boom", retry_delay_ms=0,
                                      worker_id="w1"))
    seed_job(redis_client, qs, "holder", status="processing", attempt=1, lease=1, resource_key="acct")
    claim(redis_client, qs, ws)  # the retry waits for the resource: its first wait, not its fourth
    job_state = dump(redis_client, qs)["jobs"]["a"]
    assert (job_state["status"], job_state["lock_deferrals"]) == ("scheduled", "1")
    assert_invariants(redis_client, qs)


def test_a_queued_record_without_a_type_is_dead_lettered(redis_client, qs, ws):
    """Issue 10.6: such a record was dropped silently by the claim (gone from every list)."""
    seed_job(redis_client, qs, "untyped")
    redis_client.hdel(qs.keys.job("untyped"), "type")
    seed_job(redis_client, qs, "fine")
    result = claim(redis_client, qs, ws)
    assert [j.id for j in result.jobs] == ["fine"]
    state = dump(redis_client, qs)
    assert state["dead"] == ["untyped"] and state["ready"] == []
    assert state["jobs"]["untyped"]["last_error"].startswith("malformed record: type,")
    assert_invariants(redis_client, qs)


def test_a_cancelled_id_left_in_the_ready_list_is_dropped(redis_client, qs, ws):
    seed_job(redis_client, qs, "gone")
    Queue(redis_client, settings=qs).cancel("gone")
    seed_job(redis_client, qs, "next")
    assert [j.id for j in claim(redis_client, qs, ws).jobs] == ["next"]
    state = dump(redis_client, qs)
    assert state["ready"] == [] and state["jobs"]["gone"]["status"] == "cancelled"
    assert_invariants(redis_client, qs)


def test_lock_left_by_an_earlier_lease_of_the_same_job_is_taken_over(redis_client, qs, ws):
    seed_job(redis_client, qs, "a", attempt=1, lease=1, resource_key="acct")
    redis_client.set(qs.keys.resource_lock("acct"), "a:1", px=30_000)
    result = claim(redis_client, qs, ws)
    assert [(j.id, j.lease) for j in result.jobs] == [("a", 2)]
    assert dump(redis_client, qs)["locks"] == {"acct": "a:2"}
    assert_invariants(redis_client, qs)


def test_ids_without_a_record_are_dropped(redis_client, qs, ws):
    redis_client.lpush(qs.keys.ready, "ghost")
    seed_job(redis_client, qs, "real")
    result = claim(redis_client, qs, ws)
    assert [j.id for j in result.jobs] == ["real"]
    state = dump(redis_client, qs)
    assert state["ready"] == [] and state["processing"] == ["real"]
    assert_invariants(redis_client, qs)


@pytest.mark.parametrize(("beat_age_ms", "leased"), [
    pytest.param(None, True, id="never-registered"),
    pytest.param(1_000, True, id="beat-within-the-lease"),
    pytest.param(31_000, False, id="silent-past-the-lease"),
])
def test_a_worker_silent_for_a_whole_lease_is_leased_nothing(redis_client, qs, ws, beat_age_ms,
                                                             leased):
    """A frozen worker's idle wait sent its claim before the freeze; when a job arrives, that
    claim runs in Redis although the process cannot start the job (CI saw the job its own
    expired lease had just returned to the queue leased to it again, to wait out another)."""
    seed_job(redis_client, qs, "a")
    seed_job(redis_client, qs, "due", status="retrying", attempt=1, lease=1,
             score_ms=server_ms(redis_client) - 10)
    if beat_age_ms is not None:
        redis_client.zadd(qs.keys.workers, {"w1": server_ms(redis_client) - beat_age_ms})
    before = dump(redis_client, qs)
    result = claim(redis_client, qs, ws)
    assert result.silent_worker is not leased
    if leased:
        assert [j.id for j in result.jobs] == ["due", "a"]
    else:
        assert result.jobs == [] and result.next_due_ms is None
        assert dump(redis_client, qs) == before  # nothing promoted, popped or written
        # Another worker, or this one once its beat lands, takes them.
        assert [j.id for j in claim(redis_client, qs, ws, worker="w2").jobs] == ["due", "a"]
    assert_invariants(redis_client, qs)


def claim_as(r, qs, ws, claim_id, max_jobs=2):
    return scripts.run(r, claim_op(qs, ws, worker_id="w1", max_jobs=max_jobs, claim_id=claim_id))


def test_a_claim_sent_again_answers_its_first_leases_and_leases_nothing_more(redis_client, qs,
                                                                           ws):
    """A claim whose reply is lost (the connection dropped) is sent again with the same id: it
    must give the worker the jobs the first sending leased, not strand them until their leases
    expire (and spend an attempt, the last one dead-lettering a job that never ran)."""
    for job_id in ("a", "b", "c", "d"):
        seed_job(redis_client, qs, job_id, resource_key="res-a" if job_id == "a" else None)
    first = claim_as(redis_client, qs, ws, "k1")
    assert [j.id for j in first.jobs] == ["a", "b"] and first.replayed_claimed_at_ms is None
    before = dump(redis_client, qs)

    again = claim_as(redis_client, qs, ws, "k1")
    assert again.jobs == first.jobs  # ids, leases, payloads, claimed_at: the same runs
    assert again.replayed_claimed_at_ms == first.now_ms
    assert dump(redis_client, qs) == before, "a replay writes nothing"

    # What the worker no longer holds is not answered: settled, or its lock taken.
    scripts.run(redis_client, fail_op(qs, (first.jobs[1].id, first.jobs[1].lease), error="x",
                                      retry_delay_ms=None, worker_id="w1"))
    assert [j.id for j in claim_as(redis_client, qs, ws, "k1").jobs] == ["a"]
    redis_client.set(qs.keys.resource_lock("res-a"), "z:1")
    assert claim_as(redis_client, qs, ws, "k1").jobs == []
    redis_client.set(qs.keys.resource_lock("res-a"), f"a:{first.jobs[0].lease}")
    # A new claim id is a new claim.
    assert [j.id for j in claim_as(redis_client, qs, ws, "k2").jobs] == ["c", "d"]
    assert_invariants(redis_client, qs)


def test_a_claim_sent_again_answers_numbers_as_the_first_sending_did(redis_client, qs, ws):
    """A foreign producer's record may hold its numbers in any form Lua reads as a number
    ("3.0", "1.7e12"): the first sending answers them as integers, and so must a claim sent
    again, or the worker cannot read the reply and sends the claim again and again."""
    seed_job(redis_client, qs, "a", max_attempts="3.0", created_at="1.7e12")
    first = claim_as(redis_client, qs, ws, "k1")
    again = claim_as(redis_client, qs, ws, "k1")
    assert [(j.max_attempts, j.created_at_ms) for j in first.jobs] == [(3, 1_700_000_000_000)]
    assert again.jobs == first.jobs


def test_a_replayed_claim_answers_nothing_once_its_leases_have_expired(redis_client, qs, ws):
    seed_job(redis_client, qs, "a")
    [job] = claim_as(redis_client, qs, ws, "k1").jobs
    assert 0 < redis_client.pttl(qs.keys.last_claim("w1")) <= ws.lease_ms
    redis_client.zadd(qs.keys.processing, {"a": server_ms(redis_client) - 1})  # deadline passed
    assert claim_as(redis_client, qs, ws, "k1").jobs == []
    assert read_record(redis_client, qs, "a")["lease"] == str(job.lease)  # nothing changed


def test_a_claim_without_an_id_keeps_no_record(redis_client, qs, ws):
    """Callers of earlier versions (or other languages) send no claim id: served as before."""
    seed_job(redis_client, qs, "a")
    assert len(scripts.run(redis_client, claim_op(qs, ws, worker_id="w1", max_jobs=1)).jobs) == 1
    assert not redis_client.exists(qs.keys.last_claim("w1"))
    seed_job(redis_client, qs, "b")
    assert [j.id for j in claim_as(redis_client, qs, ws, "k1", max_jobs=1).jobs] == ["b"]
    assert redis_client.get(qs.keys.last_claim("w1")).startswith("k1|")


def enqueue_with_id(r, qs, job_id, *, delay_ms=0, resource=""):
    """What a producer choosing its own ids sends (PROTOCOL.md "Enqueueing from another
    language")."""
    [op] = EnqueueCalls(qs).ops_of_encoded([[job_id, "t", "{}", 5, delay_ms, "", resource, ""]])
    return scripts.run(r, op)


def test_an_older_copy_of_a_reused_id_does_not_run_the_delayed_job_early(redis_client, qs, ws):
    """Review finding: a job cancelled while queued leaves its id in the list; the same id
    enqueued again with a delay was claimed at once from that copy, and when its delay ran out
    the due entry made the running record `queued` again, so a second worker leased it (and
    its resource lock) while the first still ran it. (With done_ttl 0 the cancelled record is
    gone at once, so the id is free for a new job.)"""
    qs = QueueSettings(name="q", done_ttl_s=0)
    register_worker(redis_client, qs)
    enqueue_with_id(redis_client, qs, "order-42", resource="acct")
    Queue(redis_client, settings=qs).cancel("order-42")
    assert redis_client.lrange(qs.keys.ready, 0, -1) == ["order-42"]
    enqueue_with_id(redis_client, qs, "order-42", delay_ms=60_000, resource="acct")

    assert claim(redis_client, qs, ws, worker="w1").jobs == []
    assert redis_client.hexists(qs.keys.queued, "order-42")  # still waiting for its delay
    assert redis_client.zscore(qs.keys.retry, "order-42") is not None
    assert redis_client.lrange(qs.keys.ready, 0, -1) == []

    redis_client.zadd(qs.keys.retry, {"order-42": server_ms(redis_client) - 1})  # due now
    [job] = claim(redis_client, qs, ws, worker="w1").jobs
    assert (job.id, job.attempt, job.lease) == ("order-42", 1, 1)
    assert claim(redis_client, qs, ws, worker="w2").jobs == []
    assert_invariants(redis_client, qs)


@pytest.mark.parametrize("status", ["processing", "done"])
def test_a_due_retry_entry_never_requeues_a_job_that_runs_or_ran(redis_client, qs, ws, status):
    seed_job(redis_client, qs, "a", status="processing", attempt=1, lease=1, resource_key="acct")
    if status == "done":
        redis_client.hset(qs.keys.job("a"), "status", "done")
        redis_client.zrem(qs.keys.processing, "a")
    redis_client.zadd(qs.keys.retry, {"a": server_ms(redis_client) - 1})  # a stray entry

    assert claim(redis_client, qs, ws, worker="w2").jobs == []
    record = read_record(redis_client, qs, "a")
    assert (record["status"], record["lease"], record["worker"]) == (status, "1", "w1")
    state = dump(redis_client, qs)
    assert state["retry"] == [] and state["ready"] == []


def test_a_job_dead_lettered_after_its_deferrals_leaves_the_line(redis_client, qs, ws):
    seed_job(redis_client, qs, "holder", status="processing", attempt=1, lease=1, resource_key="acct")
    seed_job(redis_client, qs, "waiter", resource_key="acct", lock_deferrals=ws.lock_max_deferrals)
    redis_client.zadd(qs.keys.waiting_prefix + "acct", {"waiter": 1, "other": 2})
    claim(redis_client, qs, ws)
    assert dump(redis_client, qs)["dead"] == ["waiter"]
    assert redis_client.zrange(qs.keys.waiting_prefix + "acct", 0, -1) == ["other"]


@pytest.mark.parametrize("lease_s", [6, 30, 300])
def test_a_late_claim_of_a_silent_worker_is_refused_after_a_reaper_pass(redis_client, qs, lease_s):
    """Review finding: the registry entry lived three beats (15 s) and the reaper prunes a
    worker whose entry expired, so with the default 30 s lease the claim never found the silent
    worker's last beat and served its late claim. The entry now outlives a lease."""
    ws = WorkerSettings(visibility_timeout_s=lease_s)
    interval_s = min(ws.heartbeat_interval_s, 5.0)
    ttl_ms = registry_ttl_ms(interval_s, ws.lease_ms)
    register_worker(redis_client, qs, "w1", ttl_ms=ttl_ms)
    seed_job(redis_client, qs, "a")
    # A lease and a second pass without a beat: its score and its entry's TTL say so.
    silent_ms = ws.lease_ms + 1_000
    redis_client.zadd(qs.keys.workers, {"w1": server_ms(redis_client) - silent_ms})
    redis_client.pexpire(qs.keys.worker("w1"), ttl_ms - silent_ms)
    scripts.run(redis_client, reap_op(qs, limit=100, pass_lock_ms=0, holder="test"))
    result = claim(redis_client, qs, ws, worker="w1")
    assert result.silent_worker and result.jobs == []
