"""replay.lua, purge.lua and cancel.lua: the dead-letter list and withdrawing jobs."""

from __future__ import annotations

import pytest
from antre import errors
from antre.client import Queue
from antre.protocol import scripts
from antre.protocol.cancel import cancel_op
from antre.protocol.purge import purge_oldest_op, purge_op
from antre.protocol.replay import replay_oldest_op, replay_op
from antre.settings import QueueSettings
from invariants import assert_invariants
from protocol_state import dump, run_fresh, seed_job
from redis_servers import script_usec


def seed_dead(r, qs):
    for job_id in ("d1", "d2", "d3"):  # d1 died first: oldest at the right
        seed_job(r, qs, job_id, status="dead", attempt=5, lease=5, idempotency_key=f"k-{job_id}",
                 last_error="boom", lock_deferrals=2)
        r.set(qs.keys.idempotency(f"k-{job_id}"), job_id)


def test_replay_given_ids_gives_a_fresh_attempt_budget(redis_client, qs):
    seed_dead(redis_client, qs)
    assert run_fresh(redis_client, replay_op(qs, ["d2", "nope"])) == ["d2"]
    state = dump(redis_client, qs)
    assert state["dead"] == ["d3", "d1"] and state["ready"] == ["d2"]
    job = state["jobs"]["d2"]
    assert (job["status"], job["attempt"], job["lease"], job["lock_deferrals"]) == ("queued", "0", "5", "0")
    assert job["history"] == ["replayed"]
    assert state["stats"] == {"replayed": 1}
    assert_invariants(redis_client, qs)
    assert scripts.run(redis_client, replay_op(qs, ["d2"])) == []  # rerun: not dead any more
    assert dump(redis_client, qs) == state


def test_replay_without_ids_takes_the_oldest(redis_client, qs):
    seed_dead(redis_client, qs)
    assert scripts.run(redis_client, replay_op(qs, limit=2)) == ["d1", "d2"]
    state = dump(redis_client, qs)
    assert state["dead"] == ["d3"] and state["ready"] == ["d2", "d1"]
    assert_invariants(redis_client, qs)


def test_a_replay_of_the_oldest_takes_only_letters_up_to_its_cutoff(redis_client, qs):
    """Its first call answers the newest score as the cutoff, and the later calls pass it on:
    a job that died after the replay began is left for the next replay. A letter whose record
    is gone is taken (counted in ``taken``) and dropped, not replayed."""
    seed_dead(redis_client, qs)
    redis_client.delete(qs.keys.job("d1"))  # evicted, or deleted by hand
    first = run_fresh(redis_client, replay_oldest_op(qs, limit=1))
    assert (first.taken, first.replayed) == (1, [])
    assert float(first.cutoff) == redis_client.zscore(qs.keys.dead, "d3")  # the newest
    seed_job(redis_client, qs, "d4", status="dead", attempt=1, lease=1)  # died meanwhile
    later = scripts.run(redis_client, replay_oldest_op(qs, limit=100, cutoff=first.cutoff))
    assert (later.taken, later.cutoff, later.replayed) == (2, first.cutoff, ["d2", "d3"])
    state = dump(redis_client, qs)
    assert state["dead"] == ["d4"] and state["ready"] == ["d3", "d2"]
    assert state["stats"] == {"replayed": 2}
    assert_invariants(redis_client, qs)
    last = scripts.run(redis_client, replay_oldest_op(qs, limit=100, cutoff=first.cutoff))
    assert (last.taken, last.replayed) == (0, [])
    assert dump(redis_client, qs) == state
    redis_client.delete(qs.keys.dead)
    empty = scripts.run(redis_client, replay_oldest_op(qs, limit=100))
    assert (empty.taken, empty.cutoff, empty.replayed) == (0, "", [])


def test_purge_deletes_records_and_own_idempotency_keys(redis_client, qs):
    seed_dead(redis_client, qs)
    redis_client.set(qs.keys.idempotency("k-d3"), "newer")  # re-pointed: not ours to delete
    assert run_fresh(redis_client, purge_op(qs, ["d3", "d1", "nope"])) == 2
    state = dump(redis_client, qs)
    assert state["dead"] == ["d2"]
    assert set(state["jobs"]) == {"d2"}
    assert state["idem"] == {"k-d2": "d2", "k-d3": "newer"}
    assert state["stats"] == {"purged": 2}
    assert scripts.run(redis_client, purge_op(qs, ["d3"])) == 0
    assert scripts.run(redis_client, purge_op(qs)) == 1
    assert dump(redis_client, qs)["dead"] == []


def test_a_purge_of_the_oldest_takes_only_letters_up_to_its_cutoff(redis_client, qs):
    """As a replay's: its first call answers the newest score as the cutoff, and the later
    calls pass it on, so a job that died after the purge began is left for the operator to see.
    A letter whose record is gone is taken and counted as purged."""
    seed_dead(redis_client, qs)
    redis_client.delete(qs.keys.job("d1"))  # evicted, or deleted by hand
    first = run_fresh(redis_client, purge_oldest_op(qs, limit=1))
    assert first.purged == 1
    assert float(first.cutoff) == redis_client.zscore(qs.keys.dead, "d3")  # the newest
    seed_job(redis_client, qs, "d4", status="dead", attempt=1, lease=1)  # died meanwhile
    later = scripts.run(redis_client, purge_oldest_op(qs, limit=100, cutoff=first.cutoff))
    assert (later.purged, later.cutoff) == (2, first.cutoff)
    state = dump(redis_client, qs)
    assert state["dead"] == ["d4"] and set(state["jobs"]) == {"d4"}
    # d1's key is left: only its record named it (a marker whose job is gone protects nothing).
    assert state["idem"] == {"k-d1": "d1"} and state["stats"] == {"purged": 3}
    assert_invariants(redis_client, qs)
    last = scripts.run(redis_client, purge_oldest_op(qs, limit=100, cutoff=first.cutoff))
    assert last.purged == 0
    assert dump(redis_client, qs) == state
    redis_client.delete(qs.keys.dead)
    empty = scripts.run(redis_client, purge_oldest_op(qs, limit=100))
    assert (empty.purged, empty.cutoff) == (0, "")


@pytest.mark.parametrize("status", ["queued", "scheduled", "retrying", "dead"])
def test_cancel_withdraws_a_waiting_job(redis_client, qs, status):
    seed_job(redis_client, qs, "a", status=status, attempt=1 if status != "queued" else 0, lease=1,
             idempotency_key="k")
    redis_client.set(qs.keys.idempotency("k"), "a")
    assert run_fresh(redis_client, cancel_op(qs, "a")) == status
    state = dump(redis_client, qs)
    # A queued job's id stays in the ready list (O(1) cancel); the claim that pops it drops it.
    assert state["ready"] == (["a"] if status == "queued" else [])
    assert state["retry"] == state["dead"] == state["processing"] == []
    assert state["jobs"]["a"]["status"] == "cancelled"
    assert state["jobs"]["a"]["history"] == ["cancelled"]
    assert state["idem"] == {}  # a new enqueue with the key is allowed again
    assert state["stats"] == {"cancelled": 1}
    assert 0 < redis_client.pttl(qs.keys.job("a")) <= qs.done_ttl_s * 1000
    assert_invariants(redis_client, qs)
    assert scripts.run(redis_client, cancel_op(qs, "a")) == "cancelled"  # rerun changes nothing
    assert dump(redis_client, qs) == state


def test_cancel_refuses_running_and_unknown_jobs(redis_client, qs):
    seed_job(redis_client, qs, "a", status="processing", attempt=1, lease=1)
    before = dump(redis_client, qs)
    with pytest.raises(errors.JobBusy, match="job a is processing"):
        scripts.run(redis_client, cancel_op(qs, "a"))
    assert dump(redis_client, qs) == before
    with pytest.raises(errors.JobNotFound, match="job ghost"):
        Queue(redis_client, settings=qs).cancel("ghost")


def test_cancel_with_done_ttl_zero_deletes_the_record(redis_client):
    qs = QueueSettings(name="q", done_ttl_s=0)
    seed_job(redis_client, qs, "a")
    assert scripts.run(redis_client, cancel_op(qs, "a")) == "queued"
    assert dump(redis_client, qs)["jobs"] == {}


def test_removal_by_id_does_not_scan_the_dead_letters(redis_client, qs):
    """Issue 10.7: replay, purge and cancel by id used LREM, so 1,000 unknown ids against a
    20,000-entry dead list held Redis for 0.18 s (about 9 s at a million). Each removal is now
    O(log N): 1,000 ids against 200,000 dead letters take a few milliseconds."""
    pipe = redis_client.pipeline(transaction=False)
    for start in range(0, 200_000, 10_000):
        pipe.zadd(qs.keys.dead, {f"d{i}": i for i in range(start, start + 10_000)})
    pipe.execute()
    unknown = [f"nope-{i}" for i in range(1000)]
    queue = Queue(redis_client, settings=qs)
    spent = script_usec(redis_client)
    assert queue.replay(unknown) == [] and queue.purge(unknown) == 0
    spent = script_usec(redis_client) - spent
    # LREM scanned 200,000 entries per id: minutes. 50 ms leaves a margin of 10x and more.
    assert spent < 50_000, f"{spent} us inside Redis for 2 x 1,000 unknown ids"
    assert redis_client.zcard(qs.keys.dead) == 200_000


def test_more_ids_than_one_call_takes_are_refused_by_the_script_and_split_by_the_client(
        redis_client, qs):
    seed_dead(redis_client, qs)
    ids = ["d1", *(f"nope-{i}" for i in range(1500)), "d3"]
    [op] = [replay_op(qs, ids[:1000])]
    too_many = scripts.Op(op.script, op.keys, [*op.args, "one-more"], op.parse)
    with pytest.raises(errors.InvalidArgument, match="ids: got 1001; at most 1000 per call"):
        scripts.run(redis_client, too_many)
    with pytest.raises(errors.InvalidArgument, match="ids: got 1502; at most 1000"):
        replay_op(qs, ids)
    assert sorted(Queue(redis_client, settings=qs).replay(ids)) == ["d1", "d3"]
    assert dump(redis_client, qs)["dead"] == ["d2"]
    # Purge's ids start an argument later (after its cutoff): 1,000 are taken, not 1,001.
    [op] = [purge_op(qs, ["d2", *ids[1:1000]])]
    assert scripts.run(redis_client, op) == 1
    too_many = scripts.Op(op.script, op.keys, [*op.args, "one-more"], op.parse)
    with pytest.raises(errors.InvalidArgument, match="ids: got 1001; at most 1000 per call"):
        scripts.run(redis_client, too_many)
