"""Queued fields expanded into job Hashes before workers are rolled back (PROTOCOL.md
"Versions"): each field becomes the Hash that enqueue writes for workers of an earlier version,
a delayed one scheduled, its id left where it waits (or pushed again with ``requeue``, for ids
an earlier worker already dropped); a field whose id has a job key is left as it is; nothing
changes while a worker of this version is registered (enqueues would go on writing fields), a
stale `field_readers` entry aside; ``antre expand-queued`` scans in calls of about 200."""

from __future__ import annotations

import re

import pytest
from antre import errors
from antre.cli import main
from antre.client import Queue
from antre.commands import EXIT_CONFLICT, EXIT_UNAVAILABLE
from antre.protocol import scripts
from antre.protocol.claim import claim_op
from antre.protocol.expand_queued import expand_queued_op
from antre.settings import QueueSettings
from invariants import assert_invariants
from registered_workers import register_worker

JOBS = [
    {"job_type": "t", "payload": {"n": 1}},
    {"job_type": "t", "payload": [1], "idempotency_key": "k1", "resource_key": "r1",
     "headers": {"h": "v"}, "max_attempts": 2},
    {"job_type": "t", "payload": None, "delay": 60},
]
#: What differs between two enqueues of the same job: its id and its times.
TIMES = ("id", "created_at", "queued_at", "h:1")


def _without_times(record: dict[str, str]) -> dict[str, str]:
    return {name: value for name, value in record.items() if name not in TIMES}


def _unregister(r, qs: QueueSettings) -> None:
    """The queue's workers of this version stop (a graceful stop leaves both indexes)."""
    r.delete(qs.keys.workers, qs.keys.field_readers)


def test_fields_become_the_hashes_enqueue_writes_for_earlier_workers(redis_client, qs, ws):
    register_worker(redis_client, qs)  # enqueues write fields
    queue = Queue(redis_client, settings=qs)
    ids = [queue.enqueue(**job).job_id for job in JOBS]
    assert redis_client.hlen(qs.keys.queued) == 3
    ready = redis_client.lrange(qs.keys.ready, 0, -1)
    retry = redis_client.zrange(qs.keys.retry, 0, -1, withscores=True)

    refused = scripts.run(redis_client, expand_queued_op(qs))
    assert (refused.expanded, refused.left, refused.field_readers) == (0, 3, 1)
    assert redis_client.hlen(qs.keys.queued) == 3
    _unregister(redis_client, qs)
    result = scripts.run(redis_client, expand_queued_op(qs))
    assert (result.cursor, result.expanded, result.left, result.field_readers,
            result.clashing) == ("0", 3, 0, 0, ())
    assert redis_client.exists(qs.keys.queued) == 0
    assert redis_client.lrange(qs.keys.ready, 0, -1) == ready
    assert redis_client.zrange(qs.keys.retry, 0, -1, withscores=True) == retry
    expanded = [redis_client.hgetall(qs.keys.job(job_id)) for job_id in ids]
    assert [record["status"] for record in expanded] == ["queued", "queued", "scheduled"]
    assert_invariants(redis_client, qs)

    # The same jobs enqueued on a queue that no worker of this version serves: the Hash form.
    other = QueueSettings(name="hashes")
    twin_ids = [Queue(redis_client, settings=other).enqueue(**job).job_id for job in JOBS]
    twins = [redis_client.hgetall(other.keys.job(job_id)) for job_id in twin_ids]
    assert [_without_times(record) for record in expanded] == [
        _without_times(record) for record in twins]

    # Claimed as Hashes (the delayed one stays scheduled until due).
    leased = scripts.run(redis_client, claim_op(qs, ws, worker_id="w1", max_jobs=10)).jobs
    assert sorted(job.id for job in leased) == sorted(ids[:2])
    assert queue.get(ids[2]).status == "scheduled"
    assert_invariants(redis_client, qs)


def test_a_field_whose_job_key_exists_is_left_as_it_is(redis_client, qs):
    register_worker(redis_client, qs)
    queue = Queue(redis_client, settings=qs)
    kept, clash = (queue.enqueue("t", n).job_id for n in range(2))
    _unregister(redis_client, qs)
    redis_client.set(qs.keys.job(clash), "edited by hand")
    result = scripts.run(redis_client, expand_queued_op(qs))
    assert (result.expanded, result.left, result.clashing) == (1, 1, (clash,))
    assert redis_client.hkeys(qs.keys.queued) == [clash]
    assert redis_client.get(qs.keys.job(clash)) == "edited by hand"
    assert redis_client.hget(qs.keys.job(kept), "status") == "queued"


def test_the_command_names_the_clashing_fields_and_exits_with_a_conflict(
        redis_client, redis_url, qs, capsys):
    register_worker(redis_client, qs)
    queue = Queue(redis_client, settings=qs)
    ids = [queue.enqueue("t", n).job_id for n in range(6)]
    _unregister(redis_client, qs)
    for clash in ids[:4]:
        redis_client.set(qs.keys.job(clash), "edited by hand")

    assert main(["expand-queued", "--redis-url", redis_url, "--queue", qs.name]) == EXIT_CONFLICT
    out = capsys.readouterr()
    assert out.out.strip() == "expanded 2 queued job(s) into Hashes; 4 left"
    [line] = out.err.strip().splitlines()
    assert "4 queued field(s) name a job whose key exists already" in line
    assert len([job_id for job_id in ids[:4] if job_id in line]) == 3  # the first three, then
    assert " ...): compare them with `antre job <id>`" in line
    assert sorted(redis_client.hkeys(qs.keys.queued)) == sorted(ids[:4])


def test_requeue_recovers_ids_an_earlier_worker_dropped(redis_client, qs, ws):
    """After a rollback in the wrong order an earlier worker popped an id it found only as a
    field and dropped it; with ``requeue`` the job's id is pushed again, and the one still in
    the list twice is claimed once."""
    register_worker(redis_client, qs)
    queue = Queue(redis_client, settings=qs)
    dropped, listed = (queue.enqueue("t", n).job_id for n in range(2))
    delayed = queue.enqueue("t", 2, delay=60).job_id
    _unregister(redis_client, qs)
    assert redis_client.rpop(qs.keys.ready) == dropped  # what the earlier claim did
    result = scripts.run(redis_client, expand_queued_op(qs, requeue=True))
    assert result.expanded == 3
    assert sorted(redis_client.lrange(qs.keys.ready, 0, -1)) == sorted([listed, listed, dropped])
    claimed = scripts.run(redis_client, claim_op(qs, ws, worker_id="w1", max_jobs=10)).jobs
    assert sorted(job.id for job in claimed) == sorted([dropped, listed])
    assert redis_client.llen(qs.keys.ready) == 0
    assert queue.get(delayed).status == "scheduled"
    assert_invariants(redis_client, qs)


def test_a_gone_workers_field_readers_entry_does_not_block_it(redis_client, qs):
    """An entry of this version left in `field_readers` by an earlier reaper (which prunes
    `workers` only) names no registered worker."""
    register_worker(redis_client, qs, worker_id="w-gone")
    queue = Queue(redis_client, settings=qs)
    job_id = queue.enqueue("t", 1).job_id
    redis_client.zrem(qs.keys.workers, "w-gone")
    assert scripts.run(redis_client, expand_queued_op(qs)).expanded == 1
    assert redis_client.hget(qs.keys.job(job_id), "status") == "queued"


def test_a_queued_key_of_the_wrong_type_is_one_clear_error(redis_client, qs):
    redis_client.set(qs.keys.queued, "not a hash")
    wrong = re.escape(f"KEYS[1] {qs.keys.queued} holds the wrong Redis type")
    with pytest.raises(errors.InvalidArgument, match=wrong):
        scripts.run(redis_client, expand_queued_op(qs))


def test_the_command_waits_for_this_versions_workers_then_expands_every_field(
        redis_client, redis_url, qs, capsys):
    register_worker(redis_client, qs)
    queue = Queue(redis_client, settings=qs)
    queue.enqueue_many([{"type": "t", "payload": n} for n in range(450)])
    assert redis_client.hlen(qs.keys.queued) == 450
    command = ["expand-queued", "--redis-url", redis_url, "--queue", qs.name]

    # A worker of this version is still registered: nothing changes, and the one line says why.
    assert main(command) == EXIT_UNAVAILABLE
    out = capsys.readouterr()
    assert out.out == ""
    assert "1 worker(s) of this version are registered on queue 'q'" in out.err
    assert len(out.err.strip().splitlines()) == 1
    assert redis_client.hlen(qs.keys.queued) == 450

    _unregister(redis_client, qs)
    assert main(command) == 0
    assert capsys.readouterr().out.strip() == "expanded 450 queued job(s) into Hashes; 0 left"
    assert redis_client.exists(qs.keys.queued) == 0
    assert_invariants(redis_client, qs)
