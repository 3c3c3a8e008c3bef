"""enqueue.lua: one and many jobs, delayed jobs, idempotency keys, payload limit and validation.

Each scenario asserts the whole queue state afterwards, then the invariant.
"""

from __future__ import annotations

import json
import re

import pytest
from antre import errors
from antre.client import Queue
from antre.protocol import scripts
from antre.protocol.enqueue import BATCH_SIZE, QUEUE_KEY_COUNT, NewJob, enqueue_ops
from antre.settings import QueueSettings
from invariants import assert_invariants, read_record
from protocol_state import dump, run_fresh, seed_job, server_ms
from redis_servers import wait_until
from registered_workers import register_worker


@pytest.fixture
def queue(redis_client, qs):
    return Queue(redis_client, settings=qs)


def test_enqueue_one_writes_record_and_pushes_left(redis_client, qs, queue):
    register_worker(redis_client, qs)  # served by this version: queued fields
    before = server_ms(redis_client)
    first = queue.enqueue("email", {"to": "a@b.c"}, resource_key="acct-1", max_attempts=3,
                          headers={"trace": "x"})
    second = queue.enqueue("email", [1, 2])
    after = server_ms(redis_client)
    assert first.created and second.created
    assert re.fullmatch(r"[0-9a-f]{27}", first.job_id)
    state = dump(redis_client, qs)
    assert state["ready"] == [second.job_id, first.job_id]  # LPUSH; workers pop from the right
    assert state["processing"] == state["retry"] == state["dead"] == []
    assert state["stats"] == {"enqueued": 2}
    assert state["locks"] == state["idem"] == {}
    assert state["jobs"][first.job_id] == {
        "id": first.job_id, "type": "email", "payload": '{"to":"a@b.c"}', "status": "queued",
        "attempt": "0", "max_attempts": "3", "lease": "0", "schema_version": "1",
        "resource_key": "acct-1", "headers": '{"trace":"x"}', "events": "1", "history": ["enqueued"],
    }
    assert state["jobs"][second.job_id]["max_attempts"] == str(qs.max_attempts)
    record = read_record(redis_client, qs, first.job_id)
    assert before <= int(record["created_at"]) <= after
    # Ready since it was created: no queued_at or updated_at until they differ from created_at.
    assert "queued_at" not in record and "updated_at" not in record
    # Not claimed yet: a field of the queued Hash (no key of its own), which never expires.
    assert redis_client.hexists(qs.keys.queued, first.job_id)
    assert redis_client.exists(qs.keys.job(first.job_id)) == 0
    assert redis_client.ttl(qs.keys.queued) == -1
    assert_invariants(redis_client, qs)


def test_delayed_job_goes_to_retry_set_scheduled(redis_client, qs, queue):
    before = server_ms(redis_client)
    result = queue.enqueue("t", None, delay=5)
    state = dump(redis_client, qs)
    assert state["ready"] == [] and state["retry"] == [result.job_id]
    assert state["jobs"][result.job_id]["status"] == "scheduled"
    due = redis_client.zscore(qs.keys.retry, result.job_id)
    assert before + 5000 <= due <= server_ms(redis_client) + 5000
    assert int(read_record(redis_client, qs, result.job_id).get("queued_at")) == due
    assert_invariants(redis_client, qs)


def test_idempotency_key_returns_existing_job(redis_client, qs, queue):
    first = queue.enqueue("t", {"n": 1, "m": 2}, idempotency_key="order-7")
    again = queue.enqueue("t", {"m": 2, "n": 1}, idempotency_key="order-7")  # same payload
    assert again.job_id == first.job_id and again.created is False
    state = dump(redis_client, qs)
    assert state["ready"] == [first.job_id]
    digest = state["jobs"][first.job_id]["idempotency_digest"]
    assert state["idem"] == {"order-7": f"{first.job_id}|{digest}"}
    assert state["stats"] == {"enqueued": 1}
    assert state["jobs"][first.job_id]["payload"] == '{"m":2,"n":1}'  # the duplicate wrote nothing
    assert_invariants(redis_client, qs)


@pytest.mark.parametrize(("job_type", "payload"), [
    pytest.param("t", {"n": 2}, id="other-payload"),
    pytest.param("u", {"n": 1}, id="other-type"),
])
def test_idempotency_key_reused_for_another_request_is_a_conflict(redis_client, qs, queue,
                                                                  job_type, payload):
    """Issue 12.8: a known key re-posted with another type or payload must not hand out the
    original job (and its payload): it is a conflict, and nothing is written."""
    first = queue.enqueue("t", {"n": 1}, idempotency_key="order-7")
    before = dump(redis_client, qs)
    with pytest.raises(errors.IdempotencyConflict, match=f"idempotency key order-7 was used for "
                                                         f"job {first.job_id} with another type"):
        queue.enqueue(job_type, payload, idempotency_key="order-7")
    with pytest.raises(errors.IdempotencyConflict):  # in a batch: nothing of it is written
        queue.enqueue_many([("t", 0), {"type": job_type, "payload": payload,
                                       "idempotency_key": "order-7"}])
    with pytest.raises(errors.IdempotencyConflict):  # two requests inside one batch
        queue.enqueue_many([{"type": "t", "payload": 1, "idempotency_key": "new"},
                            {"type": "t", "payload": 2, "idempotency_key": "new"}])
    assert dump(redis_client, qs) == before


def test_idempotency_key_lives_as_long_as_its_job(redis_client, qs, queue):
    """Issue 10.2: the key was set with the enqueue TTL and never refreshed, so a job that
    stayed live longer (delayed, a long backlog, retries, dead) let a second job in with the
    same key. It now has no expiry while the job is live, and cancel and purge delete it."""
    short = QueueSettings(name=qs.name, idempotency_ttl_s=0.05)
    producer = Queue(redis_client, settings=short)
    enqueued_at = server_ms(redis_client)
    first = producer.enqueue("t", 1, idempotency_key="k", delay=3600)  # delayed for an hour
    assert redis_client.pttl(short.keys.idempotency("k")) == -1
    # Past what used to be the key's TTL, on the clock that expires keys.
    wait_until(lambda: server_ms(redis_client) > enqueued_at + 200, timeout_s=5)
    again = producer.enqueue("t", 1, idempotency_key="k")
    assert (again.job_id, again.created) == (first.job_id, False)
    # Dead, as after its attempts: a claimed job has its own Hash.
    record = read_record(redis_client, short, first.job_id)
    redis_client.hdel(short.keys.queued, first.job_id)
    redis_client.hset(short.keys.job(first.job_id), mapping={**record, "status": "dead"})
    redis_client.zrem(short.keys.retry, first.job_id)
    redis_client.zadd(short.keys.dead, {first.job_id: 1})
    again = producer.enqueue("t", 1, idempotency_key="k")
    assert (again.job_id, again.created) == (first.job_id, False)
    assert producer.purge([first.job_id]) == 1
    assert redis_client.exists(short.keys.idempotency("k")) == 0
    third = producer.enqueue("t", 1, idempotency_key="k")
    assert third.created and third.job_id != first.job_id
    assert producer.cancel(third.job_id) == "queued"
    assert redis_client.exists(short.keys.idempotency("k")) == 0
    assert_invariants(redis_client, short)


def test_an_existing_id_returns_the_existing_job_untouched(redis_client, qs, queue):
    """Issue 10.3: a producer choosing an id already in use overwrote the live record (lease
    back to 0, history gone) and left the job both queued and leased. Now the existing job is
    returned as it is, and ids are validated by the script too."""
    seed_job(redis_client, qs, "job-1", status="processing", attempt=1, lease=1)
    before = dump(redis_client, qs)
    [op] = enqueue_ops(qs, [NewJob("other", {"x": 1})])
    args = list(op.args)
    args[2] = "job-1"  # the first job's id, as a foreign producer might choose it
    keys = [*op.keys[:QUEUE_KEY_COUNT], qs.keys.job("job-1")]
    [result] = scripts.run(redis_client, scripts.Op(op.script, keys, args, op.parse))
    assert (result.job_id, result.created) == ("job-1", False)
    assert dump(redis_client, qs) == before


@pytest.mark.parametrize("stored, known", [
    pytest.param('["t","{}",1765000000000,3,[]]', True, id="a-packed-record"),
    pytest.param("hello", False, id="a-foreign-string"),
    pytest.param('["not json', False, id="text-that-does-not-decode"),
])
def test_an_id_whose_key_is_a_string_is_known_only_when_it_holds_a_packed_record(
        redis_client, qs, stored, known):
    """A finished or dead record kept for its TTL is a packed String: its id names a job. Any
    other String at a job key is a key of the wrong type, refused with nothing written."""
    redis_client.set(qs.keys.job("job-1"), stored)
    [op] = enqueue_ops(qs, [NewJob("t", {"x": 1})])
    args = list(op.args)
    args[2] = "job-1"
    keys = [*op.keys[:QUEUE_KEY_COUNT], qs.keys.job("job-1")]
    call = scripts.Op(op.script, keys, args, op.parse)
    if known:
        [result] = scripts.run(redis_client, call)
        assert (result.job_id, result.created) == ("job-1", False)
    else:
        with pytest.raises(errors.InvalidArgument, match="job key of id job-1 holds the wrong"):
            scripts.run(redis_client, call)
    assert redis_client.get(qs.keys.job("job-1")) == stored
    assert redis_client.llen(qs.keys.ready) == 0


@pytest.mark.parametrize("job_id", [
    pytest.param("", id="empty"),
    pytest.param("a:b", id="colon"),
    pytest.param("a|b", id="bar"),
    pytest.param("a b", id="space"),
    pytest.param("a\x01b", id="control-character"),
    pytest.param("ab\n", id="ends-in-a-newline"),
    pytest.param("x" * 129, id="too-long"),
])
def test_the_script_refuses_an_unusable_id(redis_client, qs, job_id):
    [op] = enqueue_ops(qs, [NewJob("t", 1)])
    args = list(op.args)
    args[2] = job_id
    keys = [*op.keys[:QUEUE_KEY_COUNT], qs.keys.job(job_id)]
    with pytest.raises(errors.InvalidArgument, match="job 1: id got"):
        scripts.run(redis_client, scripts.Op(op.script, keys, args, op.parse))
    assert redis_client.dbsize() == 0


def test_idempotency_key_of_purged_job_no_longer_protects(redis_client, qs, queue):
    first = queue.enqueue("t", 1, idempotency_key="k")
    redis_client.hdel(qs.keys.queued, first.job_id)  # record gone (purged or evicted)
    redis_client.delete(qs.keys.job(first.job_id))  # in either form
    redis_client.lrem(qs.keys.ready, 0, first.job_id)
    second = queue.enqueue("t", 2, idempotency_key="k")
    assert second.created and second.job_id != first.job_id
    assert dump(redis_client, qs)["idem"]["k"].startswith(second.job_id + "|")
    assert_invariants(redis_client, qs)


def test_enqueue_many_in_batches_with_duplicates_inside(redis_client, qs, queue):
    specs = [("t", {"i": i}) for i in range(BATCH_SIZE + 10)]
    specs.append({"type": "t", "payload": 1, "idempotency_key": "dup"})
    specs.append(NewJob(type="t", payload=1, idempotency_key="dup"))
    specs.append({"type": "t", "delay": 30})
    ops = enqueue_ops(qs, [NewJob(type="t")] * (BATCH_SIZE + 1))
    assert len(ops) == 2  # BATCH_SIZE jobs per round trip
    results = queue.enqueue_many(specs)
    assert len(results) == len(specs)
    assert results[-3].created and not results[-2].created
    assert results[-2].job_id == results[-3].job_id
    state = dump(redis_client, qs)
    assert len(state["ready"]) == BATCH_SIZE + 11
    assert state["ready"][-1] == results[0].job_id  # first enqueued, first claimed
    assert state["retry"] == [results[-1].job_id]
    assert state["stats"] == {"enqueued": BATCH_SIZE + 12}
    assert len(state["jobs"]) == BATCH_SIZE + 12
    assert_invariants(redis_client, qs)


def test_enqueue_many_validates_every_job_before_writing(redis_client, qs, queue):
    with pytest.raises(errors.InvalidArgument, match="max_attempts"):
        queue.enqueue_many([("t", 1), {"type": "t", "max_attempts": 0}])
    assert redis_client.dbsize() == 0


def test_payload_limit(redis_client):
    from antre.settings import QueueSettings

    qs = QueueSettings(name="small", max_payload_bytes=100)
    queue = Queue(redis_client, settings=qs)
    queue.enqueue("t", "x" * 98)  # 100 bytes encoded with the quotes
    with pytest.raises(errors.PayloadTooLarge, match=r"101 bytes encoded; must be at most 100 bytes"):
        queue.enqueue("t", "x" * 99)
    assert redis_client.llen(qs.keys.ready) == 1


def test_default_payload_limit_is_256_kib(redis_client, qs, queue):
    with pytest.raises(errors.PayloadTooLarge, match=str(256 * 1024)):
        queue.enqueue("t", "x" * (256 * 1024))


def _nested_lists(depth: int) -> list[object]:
    value: list[object] = []
    for _ in range(depth):
        value = [value]
    return value


@pytest.mark.parametrize(("kwargs", "message"), [
    pytest.param({"job_type": ""}, r"type: got ''; must be a non-empty string", id="empty-type"),
    pytest.param({"job_type": "x" * 201}, r"type: .* at most 200 characters", id="long-type"),
    pytest.param({"payload": {1, 2}}, r"payload: .*JSON-serialisable", id="set-payload"),
    pytest.param({"payload": float("nan")}, r"payload: .*JSON-serialisable", id="nan-payload"),
    pytest.param({"max_attempts": 0}, r"max_attempts: got 0; must be an integer from 1 to 1000",
                 id="zero-attempts"),
    pytest.param({"max_attempts": 1001}, r"max_attempts: got 1001; must be an integer from 1 to 1000",
                 id="too-many-attempts"),
    pytest.param({"max_attempts": True}, r"max_attempts: got True", id="bool-attempts"),
    pytest.param({"delay": -1}, r"delay: got -1; must be a number of seconds from 0 to "
                 r"315,360,000 \(ten years\)", id="negative-delay"),
    pytest.param({"delay": 1e300}, r"delay: got 1e\+300; must be a number of seconds from 0",
                 id="absurd-delay"),
    pytest.param({"payload": {1: "a", "b": 2}}, r"payload: .*dict with string keys",
                 id="mixed-keys"),
    pytest.param({"payload": _nested_lists(20_000)},
                 r"payload: maximum recursion depth.*nested at most", id="deeply-nested"),
    pytest.param({"job_type": "t\udcff"}, r"type: got 't\\udcff'; must be valid Unicode text",
                 id="lone-surrogate-type"),
    pytest.param({"idempotency_key": "k\ud800"}, r"idempotency_key: .*must be valid Unicode",
                 id="lone-surrogate-key"),
    pytest.param({"payload": {"note": "\ud800"}}, r"payload: got .*; must be valid Unicode text",
                 id="lone-surrogate-payload"),
    pytest.param({"payload": [{"\udc00": 1}]}, r"payload: got .*; must be valid Unicode text",
                 id="lone-surrogate-payload-key"),
    pytest.param({"idempotency_key": ""}, r"idempotency_key: got ''; must be a non-empty", id="empty-idem"),
    pytest.param({"resource_key": "r" * 513}, r"resource_key: .* at most 512", id="long-resource"),
])
def test_validation_messages_name_field_value_and_rule(redis_client, queue, kwargs, message):
    args = {"job_type": "t", "payload": None, **kwargs}
    with pytest.raises(errors.InvalidArgument, match=message):
        queue.enqueue(args.pop("job_type"), args.pop("payload"), **args)
    assert redis_client.dbsize() == 0


def test_headers_count_in_the_payload_limit_and_must_be_strings(redis_client):
    """Issue 10.6: a 5 MB header was accepted past max_payload_bytes, and a non-string header
    value raised a bare TypeError instead of naming the field."""
    from antre.settings import QueueSettings

    queue = Queue(redis_client, settings=QueueSettings(name="small", max_payload_bytes=100))
    queue.enqueue("t", "x", headers={"h": "y" * 80})  # 3 + 88 bytes
    with pytest.raises(errors.PayloadTooLarge, match=r"payload: 5000\d{3} bytes encoded; must be "
                                                     r"at most 100 bytes with the headers"):
        queue.enqueue("t", "x", headers={"h": "y" * 5_000_000})
    for headers in ({"h": 1}, {1: "x"}, ["h"]):
        with pytest.raises(errors.InvalidArgument, match=r"headers: got .*; must be an object of "
                                                         r"string names to string values"):
            queue.enqueue("t", "x", headers=headers)
    assert redis_client.llen(queue.keys.ready) == 1


def test_unknown_dict_fields_are_rejected(queue):
    with pytest.raises(errors.InvalidArgument, match=r"unknown field\(s\) \['typo'\]"):
        queue.enqueue_many([{"type": "t", "typo": 1}])


def test_noscript_reload(redis_client, qs):
    [op] = enqueue_ops(qs, [NewJob(type="t", payload={"a": 1})])
    [result] = run_fresh(redis_client, op)
    assert result.created
    assert json.loads(read_record(redis_client, qs, result.job_id).get("payload")) == {"a": 1}
    # The script is cached again: the next call goes through EVALSHA.
    [again] = scripts.run(redis_client, enqueue_ops(qs, [NewJob(type="t")])[0])
    assert again.created
    assert_invariants(redis_client, qs)


async def test_async_queue_writes_the_same_record(redis_client, redis_url, qs):
    from antre.client import AsyncQueue
    from antre.connection import connect_async

    aq = AsyncQueue(connect_async(redis_url), settings=qs)
    try:
        result = await aq.enqueue("t", {"x": 1}, idempotency_key="a")
        again = await aq.enqueue("t", {"x": 1}, idempotency_key="a")
        info = await aq.get(result.job_id)
    finally:
        await aq.close()
    assert again.job_id == result.job_id and not again.created
    assert info.payload == {"x": 1} and info.status == "queued"
    assert_invariants(redis_client, qs)
