"""Finished and dead records packed into one String (PROTOCOL.md "Packed records"), and the
Hash records earlier versions left finished or dead, read side by side.

Aspects: a done, duplicate, cancelled and dead record is a String that every reader shows as it
showed the Hash (the fields of ``JobInfo``: type, payload, attempts, keys, worker, error, steps,
history with its times and workers) and keeps its TTL; a small job's packed record fits one
128-byte allocation with a pod-length worker id; a dead record keeps what a replay needs
(headers, idempotency digest, steps, the lease counter) and is a Hash again once replayed; a
lease counter ahead of the attempt, foreign fields and a wrapped history ring survive packing;
enqueue of a used id, a retried ack and a late ack read packed records; Hash records written
by earlier versions (done with a TTL, dead in the dead letters) stay readable by ``get``, the
dead-letter list, the snapshot reader and the dashboard, and replay, cancel and purge still
work on them.
"""

from __future__ import annotations

import json
from importlib import resources

import pytest
from antre import errors, jobs, snapshots
from antre.client import AsyncQueue, Queue
from antre.connection import connect_async
from antre.dashboard import reading
from antre.protocol import scripts
from antre.protocol.ack import ack_op
from antre.protocol.checkpoint import checkpoint_op
from antre.protocol.claim import claim_op
from antre.protocol.enqueue import QUEUE_KEY_COUNT, NewJob, enqueue_ops
from antre.protocol.fail import fail_op
from antre.protocol.release import release_op
from antre.settings import QueueSettings
from invariants import assert_invariants, read_record
from protocol_state import seed_job, server_ms
from redis_servers import wait_until
from registered_workers import register_worker

POD_WORKER = "emails-worker-7d9f8b6c5d-x2x4z-1-a1b2c3"


def _shown(info: jobs.JobInfo) -> dict[str, object]:
    """What the readers show of a job, minus what a transition changes."""
    shown = info.to_dict()
    for name in ("status", "outcome", "updated_at_ms", "last_error", "history", "attempt"):
        shown.pop(name)
    return shown


def _claim_one(redis_client, qs, ws, worker=POD_WORKER):
    [job] = scripts.run(redis_client, claim_op(qs, ws, worker_id=worker, max_jobs=1)).jobs
    return job


def _rich_job(redis_client, qs, ws):
    """A job with every optional field, claimed, with one step recorded: (id, lease, its record
    as the Hash held it just before settling)."""
    queue = Queue(redis_client, settings=qs)
    job_id = queue.enqueue("send_email", {"to": "ana@example.com", "n": 12345678901234567},
                           idempotency_key="order-7", resource_key="mailbox-ana",
                           headers={"traceparent": "00-abc-def-01"}).job_id
    job = _claim_one(redis_client, qs, ws)
    scripts.run(redis_client, checkpoint_op(qs, (job_id, job.lease), step="render",
                                            value_json='{"html": "<p>hi</p>"}',
                                            worker_id=POD_WORKER))
    return job_id, job.lease, redis_client.hgetall(qs.keys.job(job_id))


def test_done_record_is_packed_and_shows_what_the_hash_showed(redis_client, qs, ws):
    queue = Queue(redis_client, settings=qs)
    job_id, lease, live = _rich_job(redis_client, qs, ws)
    before = jobs.JobInfo.from_hash(live)
    assert scripts.run(redis_client, ack_op(qs, [(job_id, lease)], worker_id=POD_WORKER)).held == [
        True]
    key = qs.keys.job(job_id)
    assert redis_client.type(key) == "string"
    assert json.loads(redis_client.get(key))[0] == "send_email"  # plain JSON
    assert 0 < redis_client.pttl(key) <= qs.done_ttl_s * 1000

    after = queue.get(job_id)
    assert _shown(after) == _shown(before)
    assert after.payload == {"to": "ana@example.com", "n": 12345678901234567}  # exact
    assert after.steps == {"render": {"html": "<p>hi</p>"}}
    assert (after.status, after.outcome, after.attempt, after.worker) == (
        "done", "succeeded", 1, POD_WORKER)
    assert after.history[:-1] == before.history
    assert (after.history[-1].event, after.history[-1].worker) == ("acked", POD_WORKER)
    assert after.updated_at_ms == after.history[-1].at_ms
    # A retried ack (its first reply lost) still finds its lease in the packed record.
    assert scripts.run(redis_client, ack_op(qs, [(job_id, lease)], worker_id=POD_WORKER)).held == [
        True]
    assert scripts.run(redis_client, ack_op(qs, [(job_id, lease)], worker_id="other")).held == [
        False]
    # Enqueue with the id of a finished job (a foreign producer's choice) returns it untouched.
    packed = redis_client.get(key)
    [op] = enqueue_ops(qs, [NewJob("other", {"x": 1})])
    args = list(op.args)
    args[2] = job_id
    op = scripts.Op(op.script, [*op.keys[:QUEUE_KEY_COUNT], key], args, op.parse)
    assert [(r.job_id, r.created) for r in scripts.run(redis_client, op)] == [(job_id, False)]
    assert redis_client.get(key) == packed
    assert redis_client.get(qs.keys.idempotency("order-7")).endswith("|done")
    assert_invariants(redis_client, qs)


def test_a_small_job_packs_into_one_128_byte_allocation(redis_client, qs, ws):
    queue = Queue(redis_client, settings=qs)
    job_id = queue.enqueue("noop", {"n": 1}).job_id
    job = _claim_one(redis_client, qs, ws)
    scripts.run(redis_client, ack_op(qs, [(job_id, job.lease)], worker_id=POD_WORKER))
    # Redis keeps a String of up to 124 bytes in a 128-byte allocation (3-byte header, a 0).
    assert len(redis_client.get(qs.keys.job(job_id)).encode()) <= 124


def test_dead_record_keeps_what_a_replay_needs(redis_client, qs, ws):
    queue = Queue(redis_client, settings=qs)
    job_id, lease, live = _rich_job(redis_client, qs, ws)
    result = scripts.run(redis_client, fail_op(qs, (job_id, lease), error="ValueError: a|b",
                                               retry_delay_ms=None, worker_id=POD_WORKER))
    assert result.outcome == "dead"
    assert redis_client.type(qs.keys.job(job_id)) == "string"
    [dead] = queue.dead_letters()
    assert dead == queue.get(job_id)
    assert _shown(dead) == _shown(jobs.JobInfo.from_hash(live))
    assert (dead.status, dead.last_error, dead.history[-1].event, dead.history[-1].error) == (
        "dead", "ValueError: a|b", "dead", "ValueError: a|b")

    assert queue.replay([job_id]) == [job_id]
    replayed = redis_client.hgetall(qs.keys.job(job_id))  # a Hash again, ready to claim
    for name in ("type", "payload", "max_attempts", "created_at", "idempotency_key",
                 "idempotency_digest", "resource_key", "headers", "step:render", "lease"):
        assert replayed[name] == live[name], name
    again = _claim_one(redis_client, qs, ws)
    assert (again.id, again.lease, again.attempt) == (job_id, lease + 1, 1)
    assert json.loads(again.headers_json) == {"traceparent": "00-abc-def-01"}
    assert_invariants(redis_client, qs)


def test_lease_ahead_of_attempt_and_foreign_fields_survive_packing(redis_client, qs, ws):
    queue = Queue(redis_client, settings=qs)
    job_id = queue.enqueue("t", None).job_id
    redis_client.hset(qs.keys.job(job_id), "tenant", "acme")  # a field another producer adds
    first = _claim_one(redis_client, qs, ws)
    scripts.run(redis_client, release_op(qs, [(job_id, first.lease)], worker_id=POD_WORKER,
                                         reason="shutdown"))
    second = _claim_one(redis_client, qs, ws)
    assert (second.attempt, second.lease) == (1, 2)  # the release gave the attempt back
    scripts.run(redis_client, ack_op(qs, [(job_id, second.lease)], worker_id=POD_WORKER))
    record = read_record(redis_client, qs, job_id)
    assert (record["lease"], record["attempt"], record["tenant"]) == ("2", "1", "acme")
    assert scripts.run(redis_client, ack_op(qs, [(job_id, 2)], worker_id=POD_WORKER)).held == [True]
    assert scripts.run(redis_client, ack_op(qs, [(job_id, 1)], worker_id=POD_WORKER)).held == [
        False]
    assert [e.event for e in queue.get(job_id).history] == [
        "enqueued", "claimed", "released", "claimed", "acked"]


#: Both ways the ack packs a record, on the record at KEYS[1] acked at ARGV[1] ms.
_BOTH_PACKINGS = """
local flat = redis.call('HGETALL', KEYS[1])
local by_name = {}
for i = 1, #flat, 2 do by_name[flat[i]] = flat[i + 1] end
local now = tonumber(ARGV[1])
local fast = packed_one_run(by_name, #flat / 2, now)
local n, hfield, hvalue = history_entry(by_name.events, 'acked', now, by_name.attempt,
  SAME_WORKER, nil)
for _, value in ipairs({'status', 'done', 'outcome', 'succeeded', 'updated_at', now,
    'finished_at', now, 'events', n, hfield, hvalue}) do
  flat[#flat + 1] = value
end
return {fast or false, pack_record(flat)}
"""


@pytest.mark.parametrize(("shape", "one_run"), [
    ("field", True), ("hash", True), ("delayed", True), ("long-worker", True),
    ("idempotent", False), ("resource", False), ("headers", False), ("released", False),
    ("acked-before-claim", False), ("worker-edited", False), ("lease-ahead", False)])
def test_the_one_run_packing_gives_pack_records_text(redis_client, qs, ws, shape, one_run):
    """The ack packs the commonest record (enqueued, claimed once) without pack_record's general
    walk; for it, the text is the same to the byte, and any other record is left to
    pack_record."""
    if shape != "hash":
        register_worker(redis_client, qs)  # compact queued jobs, as a served queue has them
    queue = Queue(redis_client, settings=qs)
    options = {"idempotent": {"idempotency_key": "k"}, "resource": {"resource_key": "r"},
               "headers": {"headers": {"h": "v"}}, "delayed": {"delay": 0.001}}
    job_id = queue.enqueue("t", {"n": 1, "text": "x" * 40}, **options.get(shape, {})).job_id
    worker = "w" * 60 if shape == "long-worker" else POD_WORKER
    if shape == "delayed":
        wait_until(lambda: queue.stats().due == 1, timeout_s=5, message="the job to fall due")
    job = _claim_one(redis_client, qs, ws, worker=worker)
    if shape == "released":
        scripts.run(redis_client, release_op(qs, [(job_id, job.lease)], worker_id=worker,
                                             reason="shutdown"))
        job = _claim_one(redis_client, qs, ws, worker=worker)
    # Hand edits: the record then differs from what its history says, which pack_record keeps
    # in extras.
    if shape == "worker-edited":
        redis_client.hset(qs.keys.job(job_id), "worker", "another-worker")
    if shape == "lease-ahead":
        redis_client.hset(qs.keys.job(job_id), "lease", job.lease + 1)
    now = server_ms(redis_client) + 5
    if shape == "acked-before-claim":  # a clock that went back: left to pack_record
        now = job.claimed_at_ms - 1
    prelude = resources.files("antre.protocol").joinpath("_prelude.lua").read_text()
    fast, general = redis_client.eval(prelude + _BOTH_PACKINGS, 1, qs.keys.job(job_id), now)
    if one_run:
        assert fast == general
        assert json.loads(fast)[4][1] == f"acked|{now - job.claimed_at_ms:x}|1|^"
    else:
        assert fast is None


def test_a_wrapped_history_ring_packs_entry_for_entry(redis_client, qs):
    queue = Queue(redis_client, settings=qs)
    now = server_ms(redis_client)
    ring = {f"h:{n % jobs.HISTORY_SLOTS}": f"released|{now - 1000 + n:x}|1|^|grace"
            for n in range(9, 40)}
    ring["h:8"] = json.dumps({"n": 40, "event": "claimed", "at": now, "attempt": 1,
                              "worker": "w1"})  # an entry in the JSON form of older versions
    seed_job(redis_client, qs, "wrapped", status="processing", attempt=1, lease=40,
             events=40, **ring)
    before = jobs.JobInfo.from_hash(redis_client.hgetall(qs.keys.job("wrapped")))
    assert scripts.run(redis_client, ack_op(qs, [("wrapped", 40)], worker_id="w1")).held == [True]
    history = queue.get("wrapped").history
    assert history[:-1] == before.history[1:]  # entry 9 gave its slot to the ack (41)
    assert (history[-1].n, history[-1].event) == (41, "acked")


def test_the_ack_taking_the_last_free_slot_of_the_ring_keeps_every_entry(redis_client, qs):
    """Until the ring wraps, the ack packs the record as it read it plus its own entry; entry 32
    takes slot 0, the last free one (the wrapped case is the test above)."""
    queue = Queue(redis_client, settings=qs)
    now = server_ms(redis_client)
    ring = {f"h:{n}": f"released|{now - 1000 + n:x}|1|^|grace" for n in range(1, 32)}
    seed_job(redis_client, qs, "full", status="processing", attempt=1, lease=31, events=31,
             **ring)
    before = jobs.JobInfo.from_hash(redis_client.hgetall(qs.keys.job("full")))
    assert len(before.history) == 31
    assert scripts.run(redis_client, ack_op(qs, [("full", 31)], worker_id="w1")).held == [True]
    assert redis_client.type(qs.keys.job("full")) == "string"
    info = queue.get("full")
    assert info.history[:-1] == before.history
    assert [(e.n, e.event) for e in info.history[-1:]] == [(32, "acked")]
    assert (info.status, info.outcome, info.attempt) == ("done", "succeeded", 1)


def test_the_same_lease_twice_in_one_ack_settles_once(redis_client, qs, ws):
    """A caller that repeats a lease in one batch gets one ack: both answers, one `done`, and the
    idempotency marker keeps its digest (a different request reusing the key stays refused)."""
    queue = Queue(redis_client, settings=qs)
    job_id = queue.enqueue("t", {"n": 1}, idempotency_key="order-9").job_id
    job = _claim_one(redis_client, qs, ws)
    pair = (job_id, job.lease)
    result = scripts.run(redis_client, ack_op(qs, [pair, ("other", 1), pair], worker_id=POD_WORKER))
    assert result.held == [True, False, True]
    assert redis_client.hget(qs.keys.stats, "done") == "1"
    assert queue.get(job_id).status == "done"
    with pytest.raises(errors.IdempotencyConflict, match=job_id):
        queue.enqueue("t", {"n": 2}, idempotency_key="order-9")
    assert queue.enqueue("t", {"n": 1}, idempotency_key="order-9") == (
        type(queue.enqueue("t", 1))(job_id, False))
    assert_invariants(redis_client, qs)


def test_an_ack_whose_ring_slot_is_taken_overwrites_it_as_hset_would(redis_client, qs):
    """A stray entry in the slot the ack's entry takes (a hand edit): the record is packed as the
    HSET of the ack's fields leaves it, the stray entry replaced, not kept beside."""
    queue = Queue(redis_client, settings=qs)
    now = server_ms(redis_client)
    ring = {f"h:{n}": f"released|{now - 1000 + n:x}|1|^|grace" for n in range(1, 8)}
    seed_job(redis_client, qs, "stray", status="processing", attempt=1, lease=6, events=6,
             **ring)
    assert scripts.run(redis_client, ack_op(qs, [("stray", 6)], worker_id="w1")).held == [True]
    history = queue.get("stray").history
    assert [(e.n, e.event) for e in history] == [*((n, "released") for n in range(1, 7)),
                                                 (7, "acked")]


@pytest.mark.parametrize("status", ["cancelled-from-queued", "cancelled-from-dead", "duplicate"])
def test_other_finished_records_are_packed(redis_client, qs, ws, status):
    queue = Queue(redis_client, settings=qs)
    if status == "duplicate":
        first = queue.enqueue("t", 1, idempotency_key="k").job_id
        twin = "twin"  # a queued Hash, as a producer in another language writes it
        seed_job(redis_client, qs, twin, idempotency_key="k")
        redis_client.set(qs.keys.idempotency("k"), f"{first}|done")
        scripts.run(redis_client, claim_op(qs, ws, worker_id="w1", max_jobs=2))
        job_id, expected = twin, ("done", "duplicate")
    else:
        job_id = queue.enqueue("t", 1, max_attempts=1).job_id
        if status == "cancelled-from-dead":
            job = _claim_one(redis_client, qs, ws)
            scripts.run(redis_client, fail_op(qs, (job_id, job.lease), error="boom",
                                              retry_delay_ms=None, worker_id=POD_WORKER))
        queue.cancel(job_id)
        expected = ("cancelled", None)
    assert redis_client.type(qs.keys.job(job_id)) == "string"
    assert 0 < redis_client.pttl(qs.keys.job(job_id)) <= qs.done_ttl_s * 1000
    info = queue.get(job_id)
    assert (info.status, info.outcome) == expected
    assert info.history[-1].event == ("duplicate" if status == "duplicate" else "cancelled")
    assert queue.cancel(job_id) == expected[0]  # already finished: nothing changes
    assert_invariants(redis_client, qs)


def test_late_ack_turns_a_packed_dead_record_done(redis_client, qs, ws):
    queue = Queue(redis_client, settings=qs)
    job_id = queue.enqueue("t", None, max_attempts=1, idempotency_key="late").job_id
    job = _claim_one(redis_client, qs, ws)
    redis_client.zadd(qs.keys.processing, {job_id: 1})  # its lease ran out long ago
    assert queue.reap().dead == 1
    assert redis_client.type(qs.keys.job(job_id)) == "string"
    assert scripts.run(redis_client, ack_op(qs, [(job_id, job.lease)], worker_id=POD_WORKER)).held == [
        True]
    info = queue.get(job_id)
    assert (info.status, info.outcome, info.history[-1].event) == ("done", "succeeded", "acked")
    assert redis_client.get(qs.keys.idempotency("late")).endswith("|done")
    assert queue.dead_count() == 0
    assert_invariants(redis_client, qs)


# -- records earlier versions wrote: Hashes -----------------------------------------------------

def _old_finished(redis_client, qs: QueueSettings, job_id: str, now: int) -> None:
    redis_client.hset(qs.keys.job(job_id), mapping={
        "id": job_id, "type": "t", "payload": '{"a": 1}', "status": "done",
        "outcome": "succeeded", "attempt": 1, "max_attempts": 5, "lease": 1, "worker": "w-old",
        "created_at": now - 20, "updated_at": now, "finished_at": now, "schema_version": 1,
        "events": 3, "h:1": json.dumps({"n": 1, "event": "enqueued", "at": now - 20, "attempt": 0}),
        "h:2": f"claimed|{now - 10:x}|1|w-old", "h:3": f"acked|{now:x}|1|^"})
    redis_client.pexpire(qs.keys.job(job_id), 60_000)


def _old_dead(redis_client, qs: QueueSettings, job_id: str, now: int, error: str) -> None:
    seed_job(redis_client, qs, job_id, status="dead", attempt=1, max_attempts=1, lease=1,
             idempotency_key=f"key-{job_id}", last_error=error, died_at=now, events=2,
             **{"h:1": f"enqueued|{now - 5:x}|0", "h:2": f"dead|{now:x}|1|w-old|{error}"})
    redis_client.set(qs.keys.idempotency(f"key-{job_id}"), job_id)


async def test_hash_records_of_earlier_versions_stay_readable(redis_client, redis_url, qs):
    queue = Queue(redis_client, settings=qs)
    now = server_ms(redis_client)
    _old_finished(redis_client, qs, "old-done", now)
    _old_dead(redis_client, qs, "old-dead", now, "boom")
    info = queue.get("old-done")
    assert (info.status, info.outcome, info.payload, info.worker) == (
        "done", "succeeded", {"a": 1}, "w-old")
    assert [(e.event, e.worker) for e in info.history] == [
        ("enqueued", None), ("claimed", "w-old"), ("acked", "w-old")]
    [dead] = queue.dead_letters()
    assert (dead.id, dead.last_error, dead.idempotency_key) == ("old-dead", "boom", "key-old-dead")

    snapshot = snapshots.read_snapshot(queue, sample_gap_s=0)
    assert [(d.job_id, d.last_error, d.died_at_ms) for d in snapshot.dead_jobs] == [
        ("old-dead", "boom", now)]
    async_queue = AsyncQueue(connect_async(redis_url), settings=qs)
    try:
        detail = await reading.read_job(async_queue, "old-done")
        window = await reading.read_window(async_queue, reading.State.DEAD, page=1, total=1)
    finally:
        await async_queue.redis.aclose()
    assert detail is not None and detail.info == info
    assert [(row.job_id, row.fields["last_error"]) for row in window.rows] == [("old-dead", "boom")]
    assert_invariants(redis_client, qs)


@pytest.mark.parametrize("action", ["replay", "cancel", "purge"])
def test_old_dead_hashes_replay_cancel_and_purge(redis_client, qs, ws, action):
    queue = Queue(redis_client, settings=qs)
    _old_dead(redis_client, qs, "old-dead", server_ms(redis_client), "boom")
    if action == "replay":
        assert queue.replay(["old-dead"]) == ["old-dead"]
        assert _claim_one(redis_client, qs, ws).lease == 2
    elif action == "cancel":
        assert queue.cancel("old-dead") == "dead"
        assert queue.get("old-dead").status == "cancelled"
        assert redis_client.type(qs.keys.job("old-dead")) == "string"
        assert not redis_client.exists(qs.keys.idempotency("key-old-dead"))
    else:
        assert queue.purge(["old-dead"]) == 1
        assert not redis_client.exists(qs.keys.job("old-dead"), qs.keys.idempotency("key-old-dead"))
    assert_invariants(redis_client, qs)


@pytest.mark.parametrize("action", ["replay", "cancel", "purge", "reaper-retention"])
def test_packed_dead_records_replay_cancel_purge_and_expire(redis_client, qs, ws, action):
    queue = Queue(redis_client, settings=qs)
    job_id = queue.enqueue("t", None, max_attempts=1, idempotency_key="k").job_id
    job = _claim_one(redis_client, qs, ws)
    scripts.run(redis_client, fail_op(qs, (job_id, job.lease), error="boom", retry_delay_ms=None,
                                      worker_id=POD_WORKER))
    if action == "replay":
        assert queue.replay() == [job_id]
        assert queue.get(job_id).status == "queued"
    elif action == "cancel":
        assert queue.cancel(job_id) == "dead"
        assert queue.get(job_id).status == "cancelled"
    elif action == "purge":
        assert queue.purge() == 1
        assert not redis_client.exists(qs.keys.job(job_id))
    else:
        redis_client.zadd(qs.keys.dead, {job_id: 1})  # died long before the retention
        short = Queue(redis_client, settings=QueueSettings(name="q", dead_ttl_s=60))
        assert short.reap().dead_expired == 1
        assert not redis_client.exists(qs.keys.job(job_id))
    if action != "replay":
        assert not redis_client.exists(qs.keys.idempotency("k"))
    assert_invariants(redis_client, qs)
