"""Queued jobs as fields of the queue's ``queued`` Hash (PROTOCOL.md "Queued jobs"): what enqueue
writes, how the claim turns a field into the job's Hash beside queued Hashes of the older layout,
and every script and reader that finds a job by id while it is still a field."""

from __future__ import annotations

import json

import pytest
from antre import errors
from antre.client import AsyncQueue, Queue
from antre.connection import connect_async
from antre.dashboard import reading
from antre.protocol import scripts
from antre.protocol.claim import claim_op
from antre.protocol.depth import depth_op
from antre.protocol.enqueue import QUEUE_KEY_COUNT, EnqueueCalls, NewJob, enqueue_ops
from antre.protocol.reap import reap_op
from antre.settings import QueueSettings
from invariants import assert_invariants, read_record
from protocol_state import dump, seed_job, server_ms
from redis_servers import compact_encoding
from registered_workers import register_worker


@pytest.fixture(autouse=True)
def served(redis_client, qs):
    """A worker of this version serves the queue: enqueue writes fields."""
    register_worker(redis_client, qs)


def claim(r, qs, ws, *, max_jobs=10, worker="w1"):
    return scripts.run(r, claim_op(qs, ws, worker_id=worker, max_jobs=max_jobs))


def queued_value(r, qs, job_id):
    text = r.hget(qs.keys.queued, job_id)
    return None if text is None else json.loads(text)


def test_enqueue_writes_one_field_and_no_key(redis_client, qs):
    queue = Queue(redis_client, settings=qs)
    before = server_ms(redis_client)
    plain = queue.enqueue("email", {"to": "a@b.c"}, max_attempts=3).job_id
    full = queue.enqueue("email", [1], idempotency_key="order-7", resource_key="acct",
                         headers={"traceparent": "00-x"}).job_id
    delayed = queue.enqueue("email", None, delay=60).job_id
    after = server_ms(redis_client)
    assert redis_client.keys(qs.keys.job("*")) == []
    assert redis_client.lrange(qs.keys.ready, 0, -1) == [full, plain]
    assert redis_client.zrange(qs.keys.retry, 0, -1) == [delayed]
    # [type, payload text, created_at, max_attempts, extras]: the head of a packed record.
    kind, payload, created_at, max_attempts = queued_value(redis_client, qs, plain)
    assert (kind, payload, max_attempts) == ("email", '{"to":"a@b.c"}', 3)
    assert before <= created_at <= after
    extras = queued_value(redis_client, qs, full)[4]
    digest = read_record(redis_client, qs, full)["idempotency_digest"]
    assert extras == {"i": "order-7", "d": digest, "r": "acct", "H": '{"traceparent":"00-x"}'}
    due = redis_client.zscore(qs.keys.retry, delayed)
    assert queued_value(redis_client, qs, delayed)[4] == {"q": due}
    # Readers see the fields the job's Hash would hold.
    assert dump(redis_client, qs)["jobs"][plain] == {
        "id": plain, "type": "email", "payload": '{"to":"a@b.c"}', "status": "queued",
        "attempt": "0", "max_attempts": "3", "lease": "0", "schema_version": "1", "events": "1",
        "history": ["enqueued"]}
    record = read_record(redis_client, qs, delayed)
    assert (record["status"], int(record["queued_at"])) == ("scheduled", due)
    assert queue.get(full).idempotency_key == "order-7"
    assert_invariants(redis_client, qs)


def test_a_queued_value_keeps_any_text_and_a_long_max_attempts_as_text(redis_client, qs, ws):
    """The enqueue writes the queued value's text itself: type and payload escaped as JSON,
    created_at from the Redis clock, a max_attempts of 15 digits or more (past what a Lua number
    keeps exactly) as a string; the job is claimed as it was sent. Arguments as a producer in
    another language may send them, past the Python client's own checks."""
    tricky = 'quote " slash / backslash \\ tab \t é ☃'
    payload = json.dumps({"text": tricky}, ensure_ascii=False)
    long_attempts = "1" + "0" * 15
    before = server_ms(redis_client)
    [op] = EnqueueCalls(qs).ops_of_encoded(
        [["j-1", tricky, payload, long_attempts, 0, "", "", ""],
         ["j-2", "t", "[]", 99999999999999, 0, "", "", ""]])
    assert [r.created for r in scripts.run(redis_client, op)] == [True, True]
    after = server_ms(redis_client)
    kind, stored_payload, created_at, max_attempts = queued_value(redis_client, qs, "j-1")
    assert (kind, stored_payload, max_attempts) == (tricky, payload, long_attempts)
    assert before <= created_at <= after
    assert queued_value(redis_client, qs, "j-2")[3] == 99999999999999
    jobs = {job.id: job for job in claim(redis_client, qs, ws).jobs}
    assert (jobs["j-1"].type, jobs["j-1"].payload_json, jobs["j-1"].max_attempts) == (
        tricky, payload, int(long_attempts))
    assert jobs["j-2"].max_attempts == 99999999999999


def test_claim_takes_a_field_and_a_queued_hash_alike(redis_client, qs, ws):
    """A fresh job is a field; a job written by an older version or a producer in another
    language (PROTOCOL.md's MULTI example) is a Hash: one claim leases both, and each ends as the
    same Hash."""
    queue = Queue(redis_client, settings=qs)
    field_id = queue.enqueue("t", {"n": 1}, resource_key="r1", headers={"h": "v"}).job_id
    seed_job(redis_client, qs, "foreign", payload={"n": 1}, resource_key="r2", headers='{"h":"v"}')
    before = server_ms(redis_client)
    result = claim(redis_client, qs, ws)
    assert [(j.id, j.attempt, j.lease, j.payload_json, j.resource_key, j.headers_json)
            for j in result.jobs] == [
        (field_id, 1, 1, '{"n":1}', "r1", '{"h":"v"}'),
        ("foreign", 1, 1, '{"n": 1}', "r2", '{"h":"v"}')]
    assert redis_client.hlen(qs.keys.queued) == 0
    state = dump(redis_client, qs)
    assert state["processing"] == [field_id, "foreign"] and state["ready"] == []
    assert state["locks"] == {"r1": f"{field_id}:1", "r2": "foreign:1"}
    record = redis_client.hgetall(qs.keys.job(field_id))
    claimed_at = int(record.pop("updated_at"))
    assert before <= claimed_at <= server_ms(redis_client)
    created_at = int(record.pop("created_at"))
    assert record == {
        "id": field_id, "type": "t", "payload": '{"n":1}', "status": "processing",
        "attempt": "1", "max_attempts": str(qs.max_attempts), "lease": "1", "worker": "w1",
        "resource_key": "r1", "headers": '{"h":"v"}', "schema_version": "1", "events": "2",
        "h:1": f"enqueued|{created_at:x}|0", "h:2": f"claimed|{claimed_at:x}|1|w1"}
    assert state["jobs"][field_id]["history"] == ["enqueued", "claimed"]
    assert redis_client.object("encoding", qs.keys.job(field_id)) == compact_encoding(redis_client)
    assert_invariants(redis_client, qs)


def test_an_id_popped_twice_in_one_claim_is_leased_once(redis_client, qs, ws):
    """The claim reads the fields of its whole batch at once; an id in the ready list twice (a
    hand edit, a foreign producer) still becomes one run: the second finds the Hash the first
    wrote."""
    queue = Queue(redis_client, settings=qs)
    job_id = queue.enqueue("t", {"n": 1}).job_id
    other = queue.enqueue("t", {"n": 2}).job_id
    redis_client.lpush(qs.keys.ready, job_id)
    result = claim(redis_client, qs, ws)
    assert [(j.id, j.lease) for j in result.jobs] == [(job_id, 1), (other, 1)]
    assert redis_client.hlen(qs.keys.queued) == 0
    assert redis_client.zrange(qs.keys.processing, 0, -1) == sorted([job_id, other])
    assert read_record(redis_client, qs, job_id)["events"] == "2"
    assert_invariants(redis_client, qs)


def test_claim_of_a_field_whose_key_is_done_or_resource_busy(redis_client, qs, ws):
    """The outcomes that do not run a fresh job (a duplicate, a deferral) start from its Hash."""
    queue = Queue(redis_client, settings=qs)
    seed_job(redis_client, qs, "holder", status="processing", attempt=1, lease=1,
             resource_key="acct")
    dup = queue.enqueue("t", 1, idempotency_key="k").job_id
    redis_client.set(qs.keys.idempotency("k"), "other|done")
    waiter = queue.enqueue("t", 2, resource_key="acct").job_id
    result = claim(redis_client, qs, ws)
    assert result.jobs == [] and [d.id for d in result.duplicates] == [dup]
    state = dump(redis_client, qs)
    assert (state["jobs"][dup]["status"], state["jobs"][dup]["outcome"]) == ("done", "duplicate")
    assert state["jobs"][dup]["history"] == ["enqueued", "duplicate"]
    assert redis_client.type(qs.keys.job(dup)) == "string"  # finished: packed
    assert state["retry"] == [waiter]
    waiting = state["jobs"][waiter]
    assert (waiting["status"], waiting["attempt"], waiting["lock_deferrals"]) == ("scheduled", "0", "1")
    assert redis_client.type(qs.keys.job(waiter)) == "hash"
    assert redis_client.hlen(qs.keys.queued) == 0
    assert_invariants(redis_client, qs)


def test_a_field_that_does_not_decode_is_dead_lettered_with_its_value(redis_client, qs, ws):
    redis_client.hset(qs.keys.queued, "bad", "not json")
    redis_client.lpush(qs.keys.ready, "bad")
    queue = Queue(redis_client, settings=qs)
    good = queue.enqueue("t", 1).job_id
    result = claim(redis_client, qs, ws)
    assert [j.id for j in result.jobs] == [good]
    record = read_record(redis_client, qs, "bad")
    assert record["status"] == "dead" and record["last_error"].startswith("malformed record")
    assert record["queued_value"] == "not json"  # nothing is lost
    assert redis_client.zrange(qs.keys.dead, 0, -1) == ["bad"]
    assert_invariants(redis_client, qs)


def test_delayed_field_is_promoted_by_moving_its_id(redis_client, qs, ws):
    queue = Queue(redis_client, settings=qs)
    job_id = queue.enqueue("t", None, delay=0.05).job_id
    assert queue.get(job_id).status == "scheduled"
    due = int(redis_client.zscore(qs.keys.retry, job_id))
    assert claim(redis_client, qs, ws).jobs == []
    while server_ms(redis_client) < due:
        pass  # the Redis clock decides when it is due; 50 ms
    assert scripts.run(redis_client, reap_op(qs, limit=100, pass_lock_ms=0, holder="t")).promoted == 1
    assert redis_client.lrange(qs.keys.ready, 0, -1) == [job_id]
    assert redis_client.hexists(qs.keys.queued, job_id)  # still its field, now queued
    assert queue.get(job_id).status == "queued"
    age = scripts.run(redis_client, depth_op(qs)).oldest_ready_age_s
    assert age is not None and 0 <= age * 1000 <= server_ms(redis_client) - due
    [job] = claim(redis_client, qs, ws).jobs
    assert job.id == job_id
    assert int(redis_client.hget(qs.keys.job(job_id), "queued_at")) == due
    assert_invariants(redis_client, qs)


@pytest.mark.parametrize("delay", [pytest.param(0, id="queued"), pytest.param(60, id="scheduled")])
@pytest.mark.parametrize("done_ttl_s", [pytest.param(600, id="kept"), pytest.param(0, id="no-ttl")])
def test_cancel_of_a_field(redis_client, ws, delay, done_ttl_s):
    qs = QueueSettings(name="q", done_ttl_s=done_ttl_s)
    queue = Queue(redis_client, settings=qs)
    job_id = queue.enqueue("t", 1, idempotency_key="k", delay=delay).job_id
    status = "scheduled" if delay else "queued"
    assert queue.cancel(job_id) == status
    assert not redis_client.hexists(qs.keys.queued, job_id)
    assert redis_client.zrange(qs.keys.retry, 0, -1) == []
    assert redis_client.exists(qs.keys.idempotency("k")) == 0
    assert redis_client.hgetall(qs.keys.stats) == {"enqueued": "1", "cancelled": "1"}
    if done_ttl_s:
        assert redis_client.type(qs.keys.job(job_id)) == "string"
        assert 0 < redis_client.pttl(qs.keys.job(job_id)) <= done_ttl_s * 1000
        info = queue.get(job_id)
        assert (info.status, info.attempt, info.idempotency_key) == ("cancelled", 0, "k")
        assert [entry.event for entry in info.history] == ["enqueued", "cancelled"]
        assert queue.cancel(job_id) == "cancelled"
        # The id still names the cancelled job.
        [op] = enqueue_ops(qs, [NewJob("t", 1)])
        args = list(op.args)
        args[2] = job_id
        keys = [*op.keys[:QUEUE_KEY_COUNT], qs.keys.job(job_id)]
        again = scripts.run(redis_client, scripts.Op(op.script, keys, args, op.parse))
        assert [(r.job_id, r.created) for r in again] == [(job_id, False)]
    else:
        assert redis_client.exists(qs.keys.job(job_id)) == 0
        with pytest.raises(errors.JobNotFound):
            queue.cancel(job_id)
    assert_invariants(redis_client, qs)
    # The claim that pops a cancelled id drops it.
    assert claim(redis_client, qs, ws).jobs == []
    assert redis_client.llen(qs.keys.ready) == 0
    assert_invariants(redis_client, qs)


def test_idempotency_and_ids_against_a_queued_field(redis_client, qs):
    queue = Queue(redis_client, settings=qs)
    first = queue.enqueue("t", {"n": 1}, idempotency_key="order-7")
    assert queue.enqueue("t", {"n": 1}, idempotency_key="order-7") == type(first)(first.job_id, False)
    with pytest.raises(errors.IdempotencyConflict, match=first.job_id):
        queue.enqueue("t", {"n": 2}, idempotency_key="order-7")
    # A marker whose job's field is gone (purged by hand, evicted) protects nothing.
    other = queue.enqueue("t", 1, idempotency_key="gone").job_id
    redis_client.hdel(qs.keys.queued, other)
    assert queue.enqueue("t", 1, idempotency_key="gone").created
    # An id chosen by a producer that names a queued field returns that job untouched, also
    # twice in one batch.
    [op] = enqueue_ops(qs, [NewJob("u", {"x": 1}), NewJob("u", {"x": 2})])
    args = list(op.args)
    args[2] = args[10] = first.job_id
    keys = [*op.keys[:QUEUE_KEY_COUNT], qs.keys.job(first.job_id), qs.keys.job(first.job_id)]
    before = dump(redis_client, qs)
    reply = scripts.run(redis_client, scripts.Op(op.script, keys, args, op.parse))
    assert [(r.job_id, r.created) for r in reply] == [(first.job_id, False)] * 2
    assert dump(redis_client, qs) == before
    assert_invariants(redis_client, qs)


def test_a_queued_key_of_the_wrong_type_writes_nothing(redis_client, qs, ws):
    queue = Queue(redis_client, settings=qs)
    seed_job(redis_client, qs, "older")
    redis_client.set(qs.keys.queued, "not a hash")
    with pytest.raises(errors.InvalidArgument, match="wrong Redis type"):
        queue.enqueue("t", 1)
    assert redis_client.lrange(qs.keys.ready, 0, -1) == ["older"]
    # The claim still leases what it pops (Hash records read as before).
    assert [j.id for j in claim(redis_client, qs, ws).jobs] == ["older"]


async def test_async_readers_find_a_queued_field(redis_url, redis_client, qs):
    """The dashboard's job search and the async client find a job that is still a field."""
    job_id = Queue(redis_client, settings=qs).enqueue("t", {"n": 1}, idempotency_key="k").job_id
    client = connect_async(redis_url)
    try:
        queue = AsyncQueue(client, settings=qs)
        assert await reading.find_job(queue, job_id) == job_id
        assert await reading.find_job(queue, "k") == job_id
        info = await queue.get(job_id)
        assert (info.status, info.type, info.payload) == ("queued", "t", {"n": 1})
        assert await queue.cancel(job_id) == "queued"
        assert (await queue.get(job_id)).status == "cancelled"
    finally:
        await client.aclose()
