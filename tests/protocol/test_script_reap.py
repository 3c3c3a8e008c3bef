"""reap.lua: requeue expired leases counting the attempt, dead when out of attempts, promote due
jobs, drop stale registry entries, batch limits, and the pass lock."""

from __future__ import annotations

from antre.client import Queue
from antre.protocol import scripts
from antre.protocol.claim import claim_op
from antre.protocol.reap import reap_op
from antre.reaper import run_once
from antre.settings import QueueSettings, WorkerSettings
from invariants import assert_invariants
from protocol_state import dump, last_attempt_with_a_waiter, outlive_lease, run_fresh, seed_job, server_ms


def reap(r, qs, *, limit=100, pass_lock_ms=0, holder="t", fresh=False):
    op = reap_op(qs, limit=limit, pass_lock_ms=pass_lock_ms, holder=holder)
    return run_fresh(r, op) if fresh else scripts.run(r, op)


def test_expired_lease_is_requeued_at_the_head_and_counts(redis_client, qs):
    now = server_ms(redis_client)
    seed_job(redis_client, qs, "waiting")
    seed_job(redis_client, qs, "lost", status="processing", attempt=2, lease=2, score_ms=now - 1,
             resource_key="acct", worker="w9")
    seed_job(redis_client, qs, "alive", status="processing", attempt=1, lease=1, score_ms=now + 60_000)
    result = reap(redis_client, qs, fresh=True)
    assert (result.ran, result.requeued, result.dead, result.promoted, result.more) == (True, 1, 0, 0, False)
    state = dump(redis_client, qs)
    assert state["ready"] == ["waiting", "lost"]
    assert state["processing"] == ["alive"]
    assert state["locks"] == {}  # the lost run's lock is freed
    job = state["jobs"]["lost"]
    assert (job["status"], job["attempt"], job["lease"]) == ("queued", "2", "2")  # attempt spent
    assert job["last_error"] == ("lease expired during attempt 2 (worker w9 lost or frozen past "
                                 "its lease, or cut off from Redis)")
    assert job["history"] == ["lease_expired"]
    assert state["stats"] == {"lease_expired": 1}
    assert_invariants(redis_client, qs)
    # Idempotent: a second pass finds nothing.
    again = reap(redis_client, qs)
    assert (again.requeued, again.dead, again.promoted) == (0, 0, 0)
    assert dump(redis_client, qs) == state


def test_job_that_keeps_losing_its_lease_ends_dead(redis_client, qs, ws):
    seed_job(redis_client, qs, "killer", max_attempts=3)
    for attempt in (1, 2, 3):
        [job] = scripts.run(redis_client, claim_op(qs, ws, worker_id=f"w{attempt}", max_jobs=1)).jobs
        assert job.attempt == attempt
        redis_client.zadd(qs.keys.processing, {"killer": 0})  # the worker died; time passes
        result = reap(redis_client, qs)
        assert (result.requeued, result.dead) == ((1, 0) if attempt < 3 else (0, 1))
        assert_invariants(redis_client, qs)
    state = dump(redis_client, qs)
    assert state["dead"] == ["killer"] and state["ready"] == []
    assert state["jobs"]["killer"]["status"] == "dead"
    assert state["jobs"]["killer"]["history"] == [
        "claimed", "lease_expired", "claimed", "lease_expired", "claimed", "dead"]
    assert state["stats"] == {"lease_expired": 3, "dead": 1}


def test_reap_promotes_due_jobs_only(redis_client, qs):
    now = server_ms(redis_client)
    seed_job(redis_client, qs, "due1", status="retrying", attempt=1, lease=1, score_ms=now - 20)
    seed_job(redis_client, qs, "due2", status="scheduled", score_ms=now - 10)
    seed_job(redis_client, qs, "later", status="scheduled", score_ms=now + 60_000)
    result = reap(redis_client, qs)
    assert result.promoted == 2
    state = dump(redis_client, qs)
    assert state["ready"] == ["due2", "due1"]  # earliest due is claimed first
    assert state["retry"] == ["later"]
    assert state["jobs"]["due1"]["status"] == state["jobs"]["due2"]["status"] == "queued"
    assert_invariants(redis_client, qs)


def test_batch_limit_reports_more_and_run_once_finishes(redis_client, qs):
    for i in range(7):
        seed_job(redis_client, qs, f"j{i}", status="processing", attempt=1, lease=1, score_ms=1)
    first = reap(redis_client, qs, limit=3)
    assert (first.requeued, first.more) == (3, True)
    totals = run_once(redis_client, qs, limit=3)
    assert (totals.requeued, totals.passes) == (4, 2)
    assert len(dump(redis_client, qs)["ready"]) == 7
    assert_invariants(redis_client, qs)


def test_pass_lock_lets_one_process_reap(redis_client, qs):
    seed_job(redis_client, qs, "lost", status="processing", attempt=1, lease=1, score_ms=1)
    assert reap(redis_client, qs, pass_lock_ms=5000, holder="w1").ran
    seed_job(redis_client, qs, "lost2", status="processing", attempt=1, lease=1, score_ms=1)
    blocked = reap(redis_client, qs, pass_lock_ms=5000, holder="w2")
    assert (blocked.ran, blocked.requeued) == (False, 0)
    assert redis_client.get(qs.keys.reaper_lock) == "w1"
    assert 0 < redis_client.pttl(qs.keys.reaper_lock) <= 5000
    assert reap(redis_client, qs).requeued == 1  # pass_lock_ms=0 (the CronJob) always runs


def test_stale_registry_entries_are_dropped(redis_client, qs):
    now = server_ms(redis_client)
    redis_client.zadd(qs.keys.workers, {"gone": now - 5000, "alive": now - 5000, "fresh": now})
    redis_client.set(qs.keys.worker("alive"), "{}", px=10_000)
    assert reap(redis_client, qs).workers_dropped == 1
    assert redis_client.zrange(qs.keys.workers, 0, -1) == ["alive", "fresh"]


def test_queue_reap_matches_the_script(redis_client, qs):
    seed_job(redis_client, qs, "lost", status="processing", attempt=1, lease=1, score_ms=1)
    assert Queue(redis_client, settings=qs).reap().requeued == 1


def test_dead_letters_are_kept_for_dead_ttl_then_deleted_with_their_key(redis_client):
    """Issue 10, also decide: dead records never expired. The reaper deletes dead letters older
    than QueueSettings.dead_ttl_s (30 days by default; 0 keeps them forever), record and
    idempotency key with them."""
    qs = QueueSettings(name="q", dead_ttl_s=3600)
    now = server_ms(redis_client)
    for job_id, died_ago_s in (("old", 3601), ("young", 3599)):
        seed_job(redis_client, qs, job_id, status="dead", attempt=5, lease=5,
                 idempotency_key=f"k-{job_id}")
        redis_client.set(qs.keys.idempotency(f"k-{job_id}"), job_id)
        redis_client.zadd(qs.keys.dead, {job_id: (now - died_ago_s * 1000) * 1000})  # in us
    result = reap(redis_client, qs)
    assert result.dead_expired == 1
    state = dump(redis_client, qs)
    assert state["dead"] == ["young"] and set(state["jobs"]) == {"young"}
    assert state["idem"] == {"k-young": "young"}
    assert state["stats"] == {"dead_expired": 1}
    forever = QueueSettings(name="q", dead_ttl_s=0)
    redis_client.zadd(qs.keys.dead, {"young": 1})  # died long ago
    assert reap(redis_client, forever).dead_expired == 0
    assert_invariants(redis_client, qs)


def test_a_pass_that_dead_letters_many_scores_none_ahead_of_the_clock(redis_client, qs, ws):
    """Before: each death of a script was scored at the Redis time plus its rank in the script,
    so a pass of 1,000 scored its last deaths about a millisecond ahead of the clock. A job a
    replay took at once could then die again scored below a letter the list held when the
    replay began, and the replay of the oldest (replay.lua), which takes the letters scored up
    to the newest at its start, would replay it twice."""
    count = 1000
    Queue(redis_client, settings=qs).enqueue_many([{"type": "t", "max_attempts": 1}] * count)
    while redis_client.llen(qs.keys.ready):
        scripts.run(redis_client, claim_op(qs, ws, worker_id="w1", max_jobs=count))
    redis_client.zadd(qs.keys.processing, dict.fromkeys(redis_client.zrange(qs.keys.processing, 0, -1), 0))
    op = reap_op(qs, limit=count, pass_lock_ms=0, holder="t")
    redis_client.script_load(op.script.text)
    pipe = redis_client.pipeline(transaction=True)  # the clock read right after the pass
    pipe.evalsha(op.script.sha, len(op.keys), *op.keys, *op.args)
    pipe.time()
    _, (seconds, micros) = pipe.execute()
    scores = [score for _, score in redis_client.zrange(qs.keys.dead, 0, -1, withscores=True)]
    assert len(set(scores)) == count  # distinct: "newest first" stays exact
    assert max(scores) <= seconds * 1_000_000 + micros


def test_dead_ids_listed_by_older_versions_move_to_the_dead_letters(redis_client, qs):
    """Older workers kept dead ids in a list, and may still push there during a rolling
    upgrade: the reaper moves them over, scored by when they died."""
    now = server_ms(redis_client)
    seed_job(redis_client, qs, "d1", status="dead", attempt=5, lease=5, died_at=now - 2000)
    seed_job(redis_client, qs, "d2", status="dead", attempt=5, lease=5, died_at=now - 1000)
    redis_client.zrem(qs.keys.dead, "d1", "d2")
    redis_client.lpush(qs.keys.legacy_dead, "d1", "d2", "replayed-since")
    assert Queue(redis_client, settings=qs).stats().dead == 3  # nothing hidden meanwhile
    reap(redis_client, qs)
    assert redis_client.exists(qs.keys.legacy_dead) == 0
    assert redis_client.zrange(qs.keys.dead, 0, -1, withscores=True) == [
        ("d1", (now - 2000) * 1000), ("d2", (now - 1000) * 1000)]
    assert Queue(redis_client, settings=qs).stats().dead == 2
    assert_invariants(redis_client, qs)


def test_a_job_dead_at_its_lease_expiry_wakes_the_job_waiting_for_its_resource(redis_client, qs,
                                                                              ws):
    """Its lock is freed and nobody takes it again: the waiter used to wait for its re-check
    (lock_defer_s). A requeued job takes the resource again itself, so then nobody is woken."""
    seed_job(redis_client, qs, "lost", max_attempts=1, resource_key="acct")
    [lost] = scripts.run(redis_client, claim_op(qs, ws, worker_id="w9", max_jobs=1)).jobs
    seed_job(redis_client, qs, "waiter", resource_key="acct")
    assert scripts.run(redis_client, claim_op(qs, ws, worker_id="w1", max_jobs=1)).jobs == []
    redis_client.zadd(qs.keys.processing, {"lost": server_ms(redis_client) - 1})  # expired

    result = reap(redis_client, qs)
    assert (result.dead, result.requeued) == (1, 0)
    assert redis_client.lrange(qs.keys.ready, 0, -1) == ["waiter"]
    assert dump(redis_client, qs)["jobs"]["waiter"]["status"] == "queued"
    [waiter] = scripts.run(redis_client, claim_op(qs, ws, worker_id="w1", max_jobs=1)).jobs
    assert (waiter.id, lost.id) == ("waiter", "lost")
    assert_invariants(redis_client, qs)


def test_a_job_dead_at_its_real_lease_expiry_wakes_the_waiter_though_its_lock_expired_too(
        redis_client, qs):
    """The claim gives the lock the lease's length and the heartbeat extends both alike, so by
    the time the reaper sees the lease expired the lock has expired with it: nothing is left to
    free, yet the resource is free and the waiter must still be woken (it used to wait for its
    re-check, lock_defer_s, here 30 s)."""
    ws = WorkerSettings(visibility_timeout_s=1, lock_defer_s=30, lock_max_deferrals=3)
    lost = last_attempt_with_a_waiter(redis_client, qs, ws, holder="lost", waiter="waiter",
                                      holder_worker="w9", waiter_worker="w1")
    outlive_lease(redis_client, qs, "lost")  # the worker died: its lease runs out for real
    assert redis_client.get(qs.keys.resource_lock("acct")) is None  # expired with the lease

    result = reap(redis_client, qs)
    assert (result.dead, result.requeued) == (1, 0)
    assert redis_client.lrange(qs.keys.ready, 0, -1) == ["waiter"]
    [waiter] = scripts.run(redis_client, claim_op(qs, ws, worker_id="w1", max_jobs=1)).jobs
    assert (waiter.id, lost.id) == ("waiter", "lost")
    assert_invariants(redis_client, qs)


def test_a_dead_jobs_lease_wakes_nobody_when_its_lock_went_to_another_job(redis_client, qs,
                                                                           ws):
    """The lock expired with the lease and another job took it: a waiter woken now would only
    be deferred again, spending one of its lock_max_deferrals."""
    seed_job(redis_client, qs, "lost", max_attempts=1, resource_key="acct")
    scripts.run(redis_client, claim_op(qs, ws, worker_id="w9", max_jobs=1))
    seed_job(redis_client, qs, "waiter", resource_key="acct")
    assert scripts.run(redis_client, claim_op(qs, ws, worker_id="w1", max_jobs=1)).jobs == []
    redis_client.zadd(qs.keys.processing, {"lost": server_ms(redis_client) - 1})  # expired
    redis_client.set(qs.keys.resource_lock("acct"), "other:1", px=30_000)  # taken since

    assert reap(redis_client, qs).dead == 1
    assert redis_client.lrange(qs.keys.ready, 0, -1) == []
    assert dump(redis_client, qs)["jobs"]["waiter"]["status"] == "scheduled"
    assert redis_client.get(qs.keys.resource_lock("acct")) == "other:1"
