"""release.lua: give leased jobs back to the head of the queue with the attempt refunded (the
first few times), keeping the lock of a run that cannot be stopped."""

from __future__ import annotations

import pytest
from antre.client import Queue
from antre.errors import InvalidArgument
from antre.protocol import scripts
from antre.protocol.claim import claim_op
from antre.protocol.fail import fail_op
from antre.protocol.release import FREE_RELEASES, release_op
from antre.protocol.replay import replay_op
from antre.protocol.unlock import unlock_op
from antre.settings import WorkerSettings
from invariants import assert_invariants, read_record
from protocol_state import dump, last_attempt_with_a_waiter, run_fresh, seed_job, server_ms


def release(r, qs, leases, *, fresh=False):
    op = release_op(qs, leases, worker_id="w1", reason="worker shutting down")
    return run_fresh(r, op) if fresh else scripts.run(r, op)


def test_release_refunds_attempt_and_puts_job_at_the_head(redis_client, qs, ws):
    seed_job(redis_client, qs, "waiting")
    seed_job(redis_client, qs, "a", status="processing", attempt=2, lease=2, resource_key="acct")
    seed_job(redis_client, qs, "b", status="processing", attempt=1, lease=5)
    assert release(redis_client, qs, [("a", 2), ("b", 4)], fresh=True) == ["released", None]
    state = dump(redis_client, qs)
    assert state["ready"] == ["waiting", "a"]  # the right end is claimed next
    assert state["processing"] == ["b"]
    assert state["locks"] == {}
    job = state["jobs"]["a"]
    assert (job["status"], job["attempt"], job["lease"]) == ("queued", "1", "2")
    assert job["history"] == ["released"]
    assert state["jobs"]["b"]["status"] == "processing"
    assert state["stats"] == {"released": 1}
    assert_invariants(redis_client, qs)
    # The same call again (its reply lost) is answered as the first; nothing changes.
    assert release(redis_client, qs, [("a", 2), ("b", 4)]) == ["released", None]
    assert dump(redis_client, qs) == state
    # Next claim takes the released job first, with the same attempt number as before.
    claimed = scripts.run(redis_client, claim_op(qs, ws, worker_id="w2", max_jobs=1)).jobs
    assert [(j.id, j.attempt, j.lease) for j in claimed] == [("a", 2, 3)]
    assert_invariants(redis_client, qs)


def test_a_release_after_the_leases_deadline_spends_the_attempt(redis_client, qs, ws):
    """A worker frozen or cut off past its lease that releases at shutdown before any reaper
    pass: the reaper would have counted that attempt, so the release does too (it refunded it)."""
    seed_job(redis_client, qs, "late", status="processing", attempt=2, lease=2,
             score_ms=server_ms(redis_client) - 10)
    seed_job(redis_client, qs, "held", status="processing", attempt=2, lease=2)
    assert release(redis_client, qs, [("late", 2), ("held", 2)]) == ["released", "released"]
    late, held = read_record(redis_client, qs, "late"), read_record(redis_client, qs, "held")
    assert (late["status"], late["attempt"], held["status"], held["attempt"]) == (
        "queued", "2", "queued", "1")
    [entry] = [e for e in Queue(redis_client, settings=qs).get("late").history
               if e.event == "released"]
    assert entry.error == "worker shutting down (after its lease expired: the attempt counts)"
    assert_invariants(redis_client, qs)


def test_after_the_free_releases_a_release_spends_the_attempt(redis_client, qs, ws):
    """Issue 10, also decide: a release refunded the attempt every time, so a job that never
    finished within a grace period looped forever. The first FREE_RELEASES are free; later ones
    spend the attempt, and out of attempts the job is dead with a reason that says why."""
    seed_job(redis_client, qs, "long", max_attempts=2)
    attempts = []
    outcomes = []
    for _ in range(FREE_RELEASES + 2):
        [job] = scripts.run(redis_client, claim_op(qs, ws, worker_id="w1", max_jobs=1)).jobs
        outcomes += release(redis_client, qs, [(job.id, job.lease)])
        attempts.append(int(read_record(redis_client, qs, "long").get("attempt")))
    assert attempts == [0] * FREE_RELEASES + [1, 2]
    assert outcomes == ["released"] * (FREE_RELEASES + 1) + ["dead"]  # the worker logs which
    state = dump(redis_client, qs)
    assert state["dead"] == ["long"] and state["ready"] == []
    error = read_record(redis_client, qs, "long").get("last_error")
    assert f"released {FREE_RELEASES + 2} times without finishing" in error
    assert state["stats"] == {"released": FREE_RELEASES + 1, "dead": 1}
    assert_invariants(redis_client, qs)
    # A replay starts the count again.
    assert scripts.run(redis_client, replay_op(qs, ["long"])) == ["long"]
    assert read_record(redis_client, qs, "long").get("releases") == "0"


@pytest.mark.parametrize("settle", ["release", "fail"])
def test_a_run_kept_going_without_a_resource_leaves_no_lock_kept_field(redis_client, qs, ws,
                                                                      settle):
    """A run that may still be going keeps its resource lock; a job without a resource has no
    lock, and its record used to keep a lock_kept field for good (nothing clears it: no unlock
    follows), packed into its finished record too."""
    seed_job(redis_client, qs, "a")
    [job] = scripts.run(redis_client, claim_op(qs, ws, worker_id="w1", max_jobs=1)).jobs
    if settle == "release":
        op = release_op(qs, [(job.id, job.lease)], worker_id="w1", reason="shutdown",
                        keep_locks={"a"})
        assert scripts.run(redis_client, op) == ["released"]
    else:
        scripts.run(redis_client, fail_op(qs, (job.id, job.lease), error="timed out",
                                          retry_delay_ms=0, worker_id="w1", keep_lock=True))
    assert "lock_kept" not in read_record(redis_client, qs, "a")
    assert_invariants(redis_client, qs)


def test_release_of_a_run_that_cannot_be_stopped_keeps_its_lock(redis_client, qs, ws):
    """Issue 10.1: a handler thread still running at the end of the grace period keeps its
    resource lock; the next attempt waits for it like any other job on the resource."""
    seed_job(redis_client, qs, "a", resource_key="printer")
    [job] = scripts.run(redis_client, claim_op(qs, ws, worker_id="w1", max_jobs=1)).jobs
    op = release_op(qs, [(job.id, job.lease)], worker_id="w1", reason="shutdown", keep_locks={"a"})
    assert scripts.run(redis_client, op) == ["released"]
    assert redis_client.get(qs.keys.resource_lock("printer")) == f"a:{job.lease}"
    assert read_record(redis_client, qs, "a").get("lock_kept") == str(job.lease)
    again = scripts.run(redis_client, claim_op(qs, ws, worker_id="w2", max_jobs=1))
    assert again.jobs == [] and read_record(redis_client, qs, "a").get("status") == "scheduled"
    assert_invariants(redis_client, qs)



def frozen_last_attempt_with_a_waiter(r, qs):
    """Job `last` (its last attempt) holds resource `acct`, frozen past its lease; `waiter` is
    deferred behind it for 30 s. Returns the settings and `last`'s run."""
    ws = WorkerSettings(lock_defer_s=30, lock_max_deferrals=3)
    last = last_attempt_with_a_waiter(r, qs, ws, holder="last", waiter="waiter",
                                      holder_worker="w1", waiter_worker="w2")
    # Released after its deadline: the attempt counts, and it was the last.
    r.zadd(qs.keys.processing, {"last": server_ms(r) - 10})
    return ws, last


def test_a_release_that_dead_letters_a_job_wakes_the_job_waiting_for_its_resource(redis_client,
                                                                                 qs):
    """A job released with no attempt left never takes its resource again: the job that has
    waited longest for it runs now, not at its next re-check."""
    ws, last = frozen_last_attempt_with_a_waiter(redis_client, qs)
    assert release(redis_client, qs, [("last", last.lease)], fresh=True) == ["dead"]
    assert redis_client.lrange(qs.keys.ready, 0, -1) == ["waiter"]
    [waiter] = scripts.run(redis_client, claim_op(qs, ws, worker_id="w2", max_jobs=1)).jobs
    assert waiter.id == "waiter"
    assert_invariants(redis_client, qs)


def test_a_release_that_dead_letters_a_job_wakes_nobody_when_its_lock_is_kept(redis_client, qs):
    """A thread still running keeps the lock: its unlock wakes the waiter when it returns."""
    _, last = frozen_last_attempt_with_a_waiter(redis_client, qs)
    op = release_op(qs, [("last", last.lease)], worker_id="w1", reason="shutdown",
                    keep_locks={"last"})
    assert scripts.run(redis_client, op) == ["dead"]
    assert redis_client.lrange(qs.keys.ready, 0, -1) == []
    assert redis_client.get(qs.keys.resource_lock("acct")) == f"last:{last.lease}"


HAND_BACK = "prefetched, handed back unstarted"


def hand_back(r, qs, leases):
    op = release_op(qs, leases, worker_id="w1", reason=HAND_BACK, event="handed_back",
                    unstarted={job_id for job_id, _ in leases})
    return scripts.run(r, op)


def test_a_hand_back_is_counted_and_recorded_apart_from_a_shutdown_release(redis_client, qs):
    """Hand-backs are routine (the work outgrew a worker's buffer): counted as `released`, they
    drowned the shutdown releases operators watch, and the history said `released` for a job
    that never started."""
    seed_job(redis_client, qs, "prefetched", status="processing", attempt=1, lease=1)
    seed_job(redis_client, qs, "running", status="processing", attempt=1, lease=1)
    assert hand_back(redis_client, qs, [("prefetched", 1)]) == ["handed_back"]
    assert release(redis_client, qs, [("running", 1)]) == ["released"]
    state = dump(redis_client, qs)
    assert state["stats"] == {"handed_back": 1, "released": 1}
    assert state["ready"] == ["prefetched", "running"]  # both at the head (the right end)
    assert state["jobs"]["prefetched"]["history"] == ["handed_back"]
    assert state["jobs"]["running"]["history"] == ["released"]
    # Never started: the attempt is back, and the hand-back is not one of the releases that
    # bound a job never finishing within a grace period.
    assert (state["jobs"]["prefetched"]["attempt"], "releases" in state["jobs"]["prefetched"]) == (
        "0", False)
    [entry] = Queue(redis_client, settings=qs).get("prefetched").history
    assert (entry.event, entry.attempt, entry.error) == ("handed_back", 1, HAND_BACK)
    assert_invariants(redis_client, qs)


def test_a_hand_back_of_a_last_attempt_after_its_deadline_ends_dead_without_blaming_a_grace_period(
        redis_client, qs):
    """Past its lease's deadline the attempt counts (as the reaper's requeue would): on the last
    one the job is dead, and its error says why without the shutdown's question."""
    seed_job(redis_client, qs, "late", status="processing", attempt=1, lease=1, max_attempts=1,
             score_ms=server_ms(redis_client) - 10)
    assert hand_back(redis_client, qs, [("late", 1)]) == ["dead"]
    state = dump(redis_client, qs)
    assert state["stats"] == {"dead": 1} and state["dead"] == ["late"]
    assert read_record(redis_client, qs, "late")["last_error"] == (
        f"{HAND_BACK} (after its lease expired: the attempt counts); out of attempts")
    assert_invariants(redis_client, qs)


def test_an_event_other_than_released_or_handed_back_is_refused_before_anything_is_written(
        redis_client, qs):
    """The event names a stats field. A call in the earlier layout (no event: the triples from
    ARGV[7]) is refused whole too, rather than read one argument off."""
    seed_job(redis_client, qs, "a", status="processing", attempt=1, lease=1)
    before = dump(redis_client, qs)
    op = release_op(qs, [("a", 1)], worker_id="w1", reason="x")
    for args in ([*op.args[:6], "shutdown", *op.args[7:]], [*op.args[:6], *op.args[7:]]):
        with pytest.raises(InvalidArgument, match="event"):
            scripts.run(redis_client, scripts.Op(op.script, op.keys, args, op.parse))
    assert dump(redis_client, qs) == before


def test_records_an_earlier_version_wrote_for_a_hand_back_read_and_are_handed_back_again(
        redis_client, qs):
    """Earlier workers wrote a hand-back as `released` with the hand-back's reason, and counted
    it under `released`: those records and counts are kept as they are, and a new hand-back adds
    its own entry and counter beside them."""
    now = server_ms(redis_client)
    seed_job(redis_client, qs, "old", status="processing", attempt=1, lease=2, events=3,
             **{"h:1": f"enqueued|{now - 30:x}|0", "h:2": f"claimed|{now - 20:x}|1|w0",
                "h:3": f"released|{now - 10:x}|1|^|{HAND_BACK}", "h:4": f"claimed|{now:x}|1|w1"})
    redis_client.hset(qs.keys.job("old"), "events", 4)
    redis_client.hset(qs.keys.stats, "released", 7)
    assert hand_back(redis_client, qs, [("old", 2)]) == ["handed_back"]
    assert dump(redis_client, qs)["stats"] == {"released": 7, "handed_back": 1}
    history = Queue(redis_client, settings=qs).get("old").history
    assert [(e.event, e.error) for e in history] == [
        ("enqueued", None), ("claimed", None), ("released", HAND_BACK), ("claimed", None),
        ("handed_back", HAND_BACK)]
    assert_invariants(redis_client, qs)


def release_of(qs, leases, *, keep=(), unstarted=(), worker="w1", reason="worker shutting down",
               event="released"):
    return release_op(qs, leases, worker_id=worker, reason=reason, keep_locks=set(keep),
                      unstarted=set(unstarted), event=event)


@pytest.mark.parametrize(("attempt", "state", "event", "want"), [
    pytest.param(1, "kept", "released", "released", id="lock-kept"),
    pytest.param(3, "kept", "released", "dead", id="dead-packed-lock-kept"),
    pytest.param(1, "freed", "released", "released", id="lock-freed"),
    pytest.param(3, "freed", "released", "dead", id="dead-packed-lock-freed"),
    pytest.param(1, "unstarted", "handed_back", "handed_back", id="handed-back"),
])
def test_a_release_sent_again_after_its_reply_was_lost_gets_the_first_answer(
        redis_client, qs, attempt, state, event, want):
    """Outages.settle sends a release again after a connection error: its first sending may
    have run. Answered 0, the stopping worker neither kept the lock of a handler still going nor
    waited for it, and logged the run lost."""
    # A last attempt past its deadline: the release spends it (out of attempts: dead).
    seed_job(redis_client, qs, "a", status="processing", attempt=attempt, max_attempts=3,
             lease=attempt, resource_key="acct",
             score_ms=server_ms(redis_client) - 10 if attempt == 3 else None)
    seed_job(redis_client, qs, "b", status="processing", attempt=1, lease=1)
    op = release_of(qs, [("a", attempt), ("b", 1)], keep={"a", "b"} if state == "kept" else (),
                    unstarted={"a", "b"} if state == "unstarted" else (), event=event,
                    reason="prefetched" if event == "handed_back" else "worker shutting down")
    first = scripts.run(redis_client, op)
    assert first == [want, event]
    after = dump(redis_client, qs)
    assert after["jobs"]["a"].get("lock_kept") == (str(attempt) if state == "kept" else None)
    assert scripts.run(redis_client, op) == first
    assert dump(redis_client, qs) == after
    if want == "dead":
        assert redis_client.type(qs.keys.job("a")) == "string"  # answered from a packed record


def test_a_release_sent_again_is_answered_while_the_job_waits_for_the_lock_it_kept(
        redis_client, qs, ws):
    """Another worker claimed the released job before the call was sent again, and found its
    resource still locked by the lock the release kept."""
    seed_job(redis_client, qs, "a", status="processing", attempt=1, lease=1, resource_key="acct")
    op = release_of(qs, [("a", 1)], keep={"a"})
    assert scripts.run(redis_client, op) == ["released"]
    assert scripts.run(redis_client, claim_op(qs, ws, worker_id="w2", max_jobs=1)).jobs == []
    state = dump(redis_client, qs)
    assert state["jobs"]["a"]["history"][-1] == "deferred"
    assert scripts.run(redis_client, op) == ["released"]
    assert dump(redis_client, qs) == state


def test_only_the_same_release_of_the_same_run_is_answered_again(redis_client, qs, ws):
    """Another worker (the lease counter repeated after a failover), another release (its
    reason, event or lock), or the job claimed again since: answered 0 as before."""
    seed_job(redis_client, qs, "a", status="processing", attempt=1, lease=1, resource_key="acct")
    op = release_of(qs, [("a", 1)], keep={"a"})
    assert scripts.run(redis_client, op) == ["released"]
    state = dump(redis_client, qs)
    for other in (release_of(qs, [("a", 1)], keep={"a"}, worker="w2"),
                  release_of(qs, [("a", 1)], keep={"a"}, reason="renewal came late"),
                  release_of(qs, [("a", 1)], keep={"a"}, event="handed_back"),
                  release_of(qs, [("a", 1)])):
        assert scripts.run(redis_client, other) == [None]
        assert dump(redis_client, qs) == state
    assert scripts.run(redis_client, op) == ["released"]
    # The handler ended (its unlock) and the job ran again: a later lease.
    assert scripts.run(redis_client, unlock_op(qs, ("a", 1), resource_key="acct")) is True
    [again] = scripts.run(redis_client, claim_op(qs, ws, worker_id="w1", max_jobs=1)).jobs
    assert again.lease == 2
    assert scripts.run(redis_client, op) == [None]
