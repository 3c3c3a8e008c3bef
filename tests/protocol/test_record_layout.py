"""The job record's compact layout: what keeps it a listpack (Redis 6.2: a ziplist), and reading
what earlier versions wrote.

Aspects: a record claimed and extended by a worker with a Kubernetes-length id stays a listpack
(every value under Redis's 64-byte ``hash-max-listpack-value``) until the ack packs it; its
history names the worker of every step of the run and each entry's time and attempt; a fresh record has no
``updated_at``/``queued_at`` and readers take ``created_at``; history entries in the JSON form of
earlier versions read as before, alone and mixed with compact ones in one ring; a ring that
wrapped numbers its entries from the ``events`` counter.
"""

from __future__ import annotations

import json

from antre import jobs
from antre.client import Queue
from antre.protocol import scripts
from antre.protocol.ack import ack_op
from antre.protocol.claim import claim_op
from antre.protocol.depth import depth_op
from antre.protocol.extend_lease import extend_lease_op
from antre.protocol.fail import fail_op
from invariants import read_record
from protocol_state import server_ms
from redis_servers import compact_encoding

#: As long as a default worker id inside a pod (<pod name>-<pid>-<random>).
POD_WORKER = "emails-worker-7d9f8b6c5d-x2x4z-1-a1b2c3"


def test_claimed_and_extended_record_stays_a_listpack_until_packed(redis_client, qs, ws):
    queue = Queue(redis_client, settings=qs)
    job_id = queue.enqueue("send_email", {"to": "ana@example.com"}).job_id
    before = server_ms(redis_client)
    claimed = scripts.run(redis_client, claim_op(qs, ws, worker_id=POD_WORKER, max_jobs=1)).jobs
    lease = (job_id, claimed[0].lease)
    scripts.run(redis_client, extend_lease_op(qs, [lease], lease_ms=30_000, worker_id=POD_WORKER,
                                              registry_entry_json="{}", registry_ttl_ms=10_000))
    assert redis_client.object("encoding", qs.keys.job(job_id)) == compact_encoding(redis_client)
    record = redis_client.hgetall(qs.keys.job(job_id))
    assert max(len(value.encode()) for value in record.values()) <= 64
    assert scripts.run(redis_client, ack_op(qs, [lease], worker_id=POD_WORKER)).held == [True]
    after = server_ms(redis_client)

    assert redis_client.type(qs.keys.job(job_id)) == "string"  # packed once done
    info = queue.get(job_id)
    assert [(e.n, e.event, e.attempt, e.worker) for e in info.history] == [
        (1, "enqueued", 0, None), (2, "claimed", 1, POD_WORKER), (3, "extended", 1, POD_WORKER),
        (4, "acked", 1, POD_WORKER)]
    assert all(before <= e.at_ms <= after for e in info.history[1:])


def test_failed_run_keeps_its_error_and_worker_in_the_history(redis_client, qs, ws):
    queue = Queue(redis_client, settings=qs)
    job_id = queue.enqueue("t", None).job_id
    claimed = scripts.run(redis_client, claim_op(qs, ws, worker_id=POD_WORKER, max_jobs=1)).jobs
    scripts.run(redis_client, fail_op(qs, (job_id, claimed[0].lease), error="ValueError: a|b",
                                      retry_delay_ms=0, worker_id=POD_WORKER))
    retrying = queue.get(job_id).history[-1]
    assert (retrying.event, retrying.attempt, retrying.worker, retrying.error) == (
        "retrying", 1, POD_WORKER, "ValueError: a|b")


def test_fresh_record_falls_back_to_created_at(redis_client, qs):
    queue = Queue(redis_client, settings=qs)
    job_id = queue.enqueue("t", None).job_id
    record = read_record(redis_client, qs, job_id)
    assert "updated_at" not in record and "queued_at" not in record
    info = queue.get(job_id)
    assert info.updated_at_ms == info.created_at_ms == int(record["created_at"])
    depth = scripts.run(redis_client, depth_op(qs))
    assert depth.oldest_ready_age_s is not None
    assert 0 <= depth.oldest_ready_age_s * 1000 <= server_ms(redis_client) - info.created_at_ms


def _json_entry(n: int, event: str, at: int, attempt: int, worker: str | None = None) -> str:
    entry = {"n": n, "event": event, "at": at, "attempt": attempt}
    if worker:
        entry["worker"] = worker
    return json.dumps(entry)


def test_history_written_by_earlier_versions_reads_with_new_entries(redis_client, qs, ws):
    """A record enqueued and claimed before the upgrade (JSON entries), acked after it."""
    queue = Queue(redis_client, settings=qs)
    now = server_ms(redis_client)
    redis_client.hset(qs.keys.job("old"), mapping={
        "id": "old", "type": "t", "payload": "null", "status": "processing", "attempt": 1,
        "max_attempts": 5, "lease": 1, "worker": "w-old", "created_at": now, "updated_at": now,
        "queued_at": now, "schema_version": 1, "events": 2,
        "h:1": _json_entry(1, "enqueued", now, 0), "h:2": _json_entry(2, "claimed", now, 1, "w-old")})
    redis_client.zadd(qs.keys.processing, {"old": now + 30_000})
    assert scripts.run(redis_client, ack_op(qs, [("old", 1)], worker_id="w-old")).held == [True]
    assert [(e.n, e.event, e.worker) for e in queue.get("old").history] == [
        (1, "enqueued", None), (2, "claimed", "w-old"), (3, "acked", "w-old")]


def test_wrapped_ring_numbers_entries_from_the_counter():
    fields = {"events": "34", "h:1": "acked|10|2|^", "h:2": "retrying|8|1|^|boom",
              "h:3": "claimed|9|2|w2", "h:0": "claimed|7|1|w1"}
    # Ring slots 0..3 hold entries 32, 33, 2 and 3 of 34: entries 33 and 34 wrapped onto 1 and 2.
    assert [(e.n, e.event, e.at_ms, e.worker) for e in jobs.read_history(fields)] == [
        (3, "claimed", 9, "w2"), (32, "claimed", 7, "w1"), (33, "acked", 16, "w1"),
        (34, "retrying", 8, "w1")]
