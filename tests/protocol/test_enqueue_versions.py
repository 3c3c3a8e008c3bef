"""Producers and workers of different versions at once (PROTOCOL.md "Versions"): a worker of an
earlier version claims a queued job only from its own Hash and drops an id it finds only as a
field, so enqueue writes the compact field only while every registered worker is of this
version, and at least one is; otherwise the Hash every version claims.

Aspects: no worker registered; a worker of this version; one of an earlier version beside it,
until the reaper prunes its expired entry; the Hash written then holds exactly the fields an
earlier enqueue wrote (plain, delayed, with an idempotency key, a resource and headers); both
forms are claimed; a batch that repeats an id and an id already queued in the other form."""

from __future__ import annotations

import pytest
from antre.client import Queue
from antre.protocol import scripts
from antre.protocol.claim import claim_op
from antre.protocol.enqueue import QUEUE_KEY_COUNT, NewJob, enqueue_ops
from antre.protocol.reap import reap_op
from antre.settings import WorkerSettings
from invariants import assert_invariants
from protocol_state import server_ms
from redis_servers import wait_until
from registered_workers import register_earlier_worker, register_worker

#: The fields the enqueue of earlier versions wrote (PROTOCOL.md's example), which their claim
#: requires: a record without attempt, lease, max_attempts, created_at or payload is malformed.
EARLIER_FIELDS = {"id", "type", "payload", "status", "attempt", "max_attempts", "lease",
                  "created_at", "schema_version", "events", "h:1"}


def enqueue_with_ids(redis_client, qs, jobs):
    """Jobs whose ids the producer chose, as a producer in another language may: (id, payload)."""
    [op] = enqueue_ops(qs, [NewJob("t", payload) for _, payload in jobs])
    args = list(op.args)
    for j, (job_id, _) in enumerate(jobs):
        args[2 + 8 * j] = job_id
    keys = [*op.keys[:QUEUE_KEY_COUNT], *(qs.keys.job(job_id) for job_id, _ in jobs)]
    return [(r.job_id, r.created)
            for r in scripts.run(redis_client, scripts.Op(op.script, keys, args, op.parse))]


def form(redis_client, qs, job_id):
    field = redis_client.hexists(qs.keys.queued, job_id)
    key = redis_client.type(qs.keys.job(job_id))
    assert not (field and key != "none"), "an id names a field and a key at once"
    return "field" if field else key


def test_with_no_worker_registered_jobs_are_hashes_every_version_claims(redis_client, qs):
    queue = Queue(redis_client, settings=qs)
    before = server_ms(redis_client)
    plain = queue.enqueue("email", {"to": "a@b.c"}, max_attempts=3).job_id
    full = queue.enqueue("email", [1], idempotency_key="k", resource_key="acct",
                         headers={"trace": "x"}).job_id
    delayed = queue.enqueue("email", None, delay=60).job_id
    assert {form(redis_client, qs, j) for j in (plain, full, delayed)} == {"hash"}
    record = redis_client.hgetall(qs.keys.job(plain))
    assert set(record) == EARLIER_FIELDS
    assert (record["status"], record["attempt"], record["lease"], record["max_attempts"]) == (
        "queued", "0", "0", "3")
    assert before <= int(record["created_at"]) <= server_ms(redis_client)
    assert record["h:1"] == f"enqueued|{int(record['created_at']):x}|0"
    assert set(redis_client.hgetall(qs.keys.job(full))) == EARLIER_FIELDS | {
        "idempotency_key", "idempotency_digest", "resource_key", "headers"}
    scheduled = redis_client.hgetall(qs.keys.job(delayed))
    assert scheduled["status"] == "scheduled"
    assert int(scheduled["queued_at"]) == redis_client.zscore(qs.keys.retry, delayed)
    assert queue.enqueue("email", [1], idempotency_key="k").job_id == full
    assert_invariants(redis_client, qs)
    claimed = scripts.run(redis_client, claim_op(qs, WorkerSettings(), worker_id="w1",
                                                 max_jobs=10))
    assert sorted(job.id for job in claimed.jobs) == sorted([plain, full])
    assert_invariants(redis_client, qs)


def test_a_worker_of_this_version_gets_fields(redis_client, qs):
    register_worker(redis_client, qs)
    queue = Queue(redis_client, settings=qs)
    job_ids = [queue.enqueue("t", i).job_id for i in range(3)]
    assert {form(redis_client, qs, j) for j in job_ids} == {"field"}
    assert redis_client.zrange(qs.keys.field_readers, 0, -1) == ["w-registered"]
    assert_invariants(redis_client, qs)


def test_an_earlier_worker_gets_hashes_until_its_entry_is_gone(redis_client, qs):
    register_worker(redis_client, qs)
    register_earlier_worker(redis_client, qs, ttl_ms=200)
    queue = Queue(redis_client, settings=qs)
    mixed = queue.enqueue_many([("t", 1), ("t", 2)])
    assert {form(redis_client, qs, r.job_id) for r in mixed} == {"hash"}
    # Its entry expires (killed, no graceful stop); a reaper pass drops it from the index.
    started = server_ms(redis_client)
    wait_until(lambda: not redis_client.exists(qs.keys.worker("w-earlier"))
               and server_ms(redis_client) > started + 1100, timeout_s=5,
               message="the earlier worker's entry expired, its beat over a second old")
    assert queue.enqueue("t", 3).created and form(redis_client, qs, mixed[0].job_id) == "hash"
    scripts.run(redis_client, reap_op(qs, limit=100, pass_lock_ms=0, holder="test"))
    assert redis_client.zrange(qs.keys.workers, 0, -1) == ["w-registered"]
    # Pruned, it may still be a worker frozen past its entry that comes back and pops ids:
    # Hashes for an hour after it was last seen registered.
    held = queue.enqueue("t", 4).job_id
    assert form(redis_client, qs, held) == "hash"
    assert 3_590_000 < redis_client.pttl(qs.keys.earlier_workers) <= 3_600_000
    redis_client.pexpire(qs.keys.earlier_workers, 1)  # the hour passes
    wait_until(lambda: not redis_client.exists(qs.keys.earlier_workers), message="the hour")
    after = queue.enqueue("t", 5).job_id
    assert form(redis_client, qs, after) == "field"
    assert_invariants(redis_client, qs)
    claimed = scripts.run(redis_client, claim_op(qs, WorkerSettings(), worker_id="w1",
                                                 max_jobs=10))
    assert len(claimed.jobs) == 5  # both forms, in order
    assert claimed.jobs[0].id == mixed[0].job_id and claimed.jobs[-1].id == after


def test_an_earlier_worker_seen_only_by_a_reaper_pass_keeps_fields_off(redis_client, qs):
    """A worker of an earlier version registered while nothing was enqueued, frozen past its
    entry and pruned: the reaper passes that saw it registered keep fields off, so the jobs
    enqueued next are Hashes it can claim when it comes back (the review's upgrade gap)."""
    register_worker(redis_client, qs)
    register_earlier_worker(redis_client, qs, ttl_ms=200)
    scripts.run(redis_client, reap_op(qs, limit=100, pass_lock_ms=0, holder="test"))
    assert redis_client.exists(qs.keys.earlier_workers)
    started = server_ms(redis_client)
    wait_until(lambda: not redis_client.exists(qs.keys.worker("w-earlier"))
               and server_ms(redis_client) > started + 1100, timeout_s=5,
               message="the earlier worker's entry expired, its beat over a second old")
    scripts.run(redis_client, reap_op(qs, limit=100, pass_lock_ms=0, holder="test"))
    assert redis_client.zrange(qs.keys.workers, 0, -1) == ["w-registered"]
    job_id = Queue(redis_client, settings=qs).enqueue("t", 1).job_id
    assert form(redis_client, qs, job_id) == "hash"
    assert_invariants(redis_client, qs)


def test_only_this_versions_workers_never_turn_fields_off(redis_client, qs):
    register_worker(redis_client, qs)
    register_worker(redis_client, qs, worker_id="w-other")
    scripts.run(redis_client, reap_op(qs, limit=100, pass_lock_ms=0, holder="test"))
    job_id = Queue(redis_client, settings=qs).enqueue("t", 1).job_id
    assert form(redis_client, qs, job_id) == "field"
    assert not redis_client.exists(qs.keys.earlier_workers)


def test_a_gone_worker_left_in_field_readers_does_not_count_for_an_earlier_one(redis_client, qs):
    """A worker of this version killed, then pruned from `workers` by a reaper of an earlier
    version, which knows no `field_readers`: its entry stays there. With one earlier worker
    registered the two sets are the same size, but not the same workers: Hashes."""
    register_worker(redis_client, qs, worker_id="w-gone")
    redis_client.zrem(qs.keys.workers, "w-gone")  # what the earlier reaper leaves
    register_earlier_worker(redis_client, qs)
    assert redis_client.zcard(qs.keys.workers) == redis_client.zcard(qs.keys.field_readers)
    job_id = Queue(redis_client, settings=qs).enqueue("t", 1).job_id
    assert form(redis_client, qs, job_id) == "hash"
    assert_invariants(redis_client, qs)


@pytest.mark.parametrize("served", [False, True], ids=["hash", "field"])
def test_an_id_names_one_job_across_the_forms(redis_client, qs, served):
    """An id repeated in one batch, and an id already queued in the other form, keep the job
    they name."""
    queue = Queue(redis_client, settings=qs)
    # The batch is written as fields (served) or Hashes; "chosen" exists in the other form.
    if not served:
        register_worker(redis_client, qs)
    assert enqueue_with_ids(redis_client, qs, [("chosen", 1)]) == [("chosen", True)]
    register_worker(redis_client, qs)
    if not served:
        register_earlier_worker(redis_client, qs)
    again = enqueue_with_ids(redis_client, qs, [("chosen", 2), ("twice", 3), ("twice", 4)])
    assert again == [("chosen", False), ("twice", True), ("twice", False)]
    written, other = ("field", "hash") if served else ("hash", "field")
    assert (form(redis_client, qs, "twice"), form(redis_client, qs, "chosen")) == (written, other)
    assert queue.get("chosen").payload == 1 and queue.get("twice").payload == 3
    assert redis_client.lrange(qs.keys.ready, 0, -1) == ["twice", "chosen"]
    assert_invariants(redis_client, qs)
