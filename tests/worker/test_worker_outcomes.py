"""Running handlers: async and plain def, Retry(delay), Permanent, unknown types, undecodable
payloads, job timeouts, jittered retry delays, checkpoints, idempotent duplicates."""

from __future__ import annotations

import asyncio
import json
import threading
import time

from antre import Backoff, Permanent, Queue, Retry
from antre.failures import UNKNOWN_TYPE_GRACE_S
from antre.handlers import HandlerRegistry
from antre.jobs import JobInfo
from invariants import as_queued_hash, assert_invariants, read_record
from worker_harness import eventually, running_worker, status_of


async def test_async_and_plain_def_handlers(redis_client, aredis, qs):
    registry = HandlerRegistry()
    seen = []

    @registry.handler("async_job")
    async def async_job(job):
        seen.append(("async", job.payload, job.attempt, threading.current_thread().name))

    @registry.handler("sync_job")
    def sync_job(job):
        seen.append(("sync", job.payload, job.attempt, threading.current_thread().name))

    queue = Queue(redis_client, settings=qs)
    a = queue.enqueue("async_job", {"n": 1}).job_id
    b = queue.enqueue("sync_job", [2]).job_id
    async with running_worker(aredis, qs, registry):
        await eventually(lambda: status_of(redis_client, qs, a) == status_of(redis_client, qs, b) == "done")
    assert sorted(s[:3] for s in seen) == [("async", {"n": 1}, 1), ("sync", [2], 1)]
    threads = {kind: name for kind, _, _, name in seen}
    assert threads["async"] == "MainThread" and threads["sync"].startswith("antre-handler")
    info = queue.get(a)
    assert (info.outcome, info.worker) == ("succeeded", "w1")
    assert [e.event for e in info.history] == ["enqueued", "claimed", "acked"]
    assert_invariants(redis_client, qs)


async def test_retry_with_delay_then_success(redis_client, aredis, qs):
    registry = HandlerRegistry()
    attempts = []

    @registry.handler("flaky")
    async def flaky(job):
        attempts.append(job.attempt)
        if job.attempt == 1:
            raise Retry("not yet", delay=0.3)

    job_id = Queue(redis_client, settings=qs).enqueue("flaky").job_id
    async with running_worker(aredis, qs, registry):
        await eventually(lambda: status_of(redis_client, qs, job_id) == "done")
    info = Queue(redis_client, settings=qs).get(job_id)
    assert attempts == [1, 2]
    events = {e.event: e for e in info.history}
    assert [e.event for e in info.history] == ["enqueued", "claimed", "retrying", "claimed", "acked"]
    assert events["retrying"].error == "Retry: not yet"
    claimed_again = info.history[3]
    assert claimed_again.at_ms - events["retrying"].at_ms >= 300  # not before its due time
    assert_invariants(redis_client, qs)


async def test_permanent_goes_straight_to_dead(redis_client, aredis, qs):
    registry = HandlerRegistry()

    @registry.handler("bad")
    def bad(job):
        raise Permanent("card declined")

    queue = Queue(redis_client, settings=qs)
    job_id = queue.enqueue("bad", max_attempts=5).job_id
    async with running_worker(aredis, qs, registry):
        await eventually(lambda: status_of(redis_client, qs, job_id) == "dead")
    info = queue.get(job_id)
    assert (info.attempt, info.last_error) == (1, "Permanent: card declined")
    assert redis_client.zrange(qs.keys.dead, 0, -1) == [job_id]
    assert_invariants(redis_client, qs)


async def test_an_undecodable_payload_goes_dead_saying_why(redis_client, aredis, qs):
    registry = HandlerRegistry()
    calls = []

    @registry.handler("known")
    async def known(job):
        calls.append(job.id)

    queue = Queue(redis_client, settings=qs)
    garbled = queue.enqueue("known", {"a": 1}).job_id
    as_queued_hash(redis_client, qs, garbled)
    redis_client.hset(qs.keys.job(garbled), "payload", "{not json")
    async with running_worker(aredis, qs, registry):
        await eventually(lambda: status_of(redis_client, qs, garbled) == "dead")
    assert calls == []
    error = read_record(redis_client, qs, garbled).get("last_error")
    assert error.startswith("undecodable payload: Expecting property name")
    assert_invariants(redis_client, qs)


async def test_a_payload_nested_deeper_than_python_parses_goes_dead_and_reads(
        redis_client, aredis, qs):
    """A producer in another language may write JSON nested 100,000 deep: the worker fails the
    job as undecodable (not a crash-and-retry), and reading the job shows it as text."""
    registry = HandlerRegistry()

    @registry.handler("known")
    async def known(job):
        pass

    queue = Queue(redis_client, settings=qs)
    deep = queue.enqueue("known", {"a": 1}).job_id
    as_queued_hash(redis_client, qs, deep)
    redis_client.hset(qs.keys.job(deep), "payload", "[" * 100_000 + "]" * 100_000)
    async with running_worker(aredis, qs, registry):
        await eventually(lambda: status_of(redis_client, qs, deep) == "dead")
    info = queue.get(deep)
    assert info.last_error.startswith("undecodable payload: maximum recursion depth")
    assert isinstance(info.payload, str) and info.attempt == 1


async def test_an_unknown_type_is_retried_without_spending_attempts_then_dead(
        redis_client, aredis, qs):
    """Issue 10, also decide: an unknown type was dead-lettered at once, which bites during a
    rolling deploy where old workers meet the new types of new producers. It is retried,
    without spending attempts, until the job is UNKNOWN_TYPE_GRACE_S old; then it is dead."""
    registry = HandlerRegistry()
    registry.register("known", lambda job: None)
    queue = Queue(redis_client, settings=qs)
    young = queue.enqueue("new-type", max_attempts=1).job_id
    old = queue.enqueue("gone-type", max_attempts=5).job_id
    created = int(read_record(redis_client, qs, old).get("created_at"))
    as_queued_hash(redis_client, qs, old)
    redis_client.hset(qs.keys.job(old), "created_at", created - int(UNKNOWN_TYPE_GRACE_S * 1000))
    async with running_worker(aredis, qs, registry):
        await eventually(lambda: status_of(redis_client, qs, young) == "retrying")
        await eventually(lambda: status_of(redis_client, qs, old) == "dead")
    info = queue.get(young)
    assert info.attempt == 0  # with max_attempts=1, a spent attempt would have made it dead
    assert info.last_error == "unknown job type 'new-type'; this worker serves ['known']"
    assert [e.event for e in info.history] == ["enqueued", "claimed", "retrying"]
    due = redis_client.zscore(qs.keys.retry, young)
    assert due - info.history[-1].at_ms >= 500  # backed off, not spinning
    gone = queue.get(old)
    assert gone.attempt == 1 and gone.last_error.startswith(
        "unknown job type 'gone-type'; this worker serves ['known'] (for 900 s)")
    assert_invariants(redis_client, qs)


async def test_job_timeout_fails_the_run(redis_client, aredis, qs):
    registry = HandlerRegistry()

    @registry.handler("slow", timeout=0.2)
    async def slow(job):
        await asyncio.sleep(30)

    queue = Queue(redis_client, settings=qs)
    job_id = queue.enqueue("slow", max_attempts=1).job_id
    async with running_worker(aredis, qs, registry):
        await eventually(lambda: status_of(redis_client, qs, job_id) == "dead", timeout_s=5)
    assert queue.get(job_id).last_error == "timed out after 0.2 s (job timeout)"
    assert_invariants(redis_client, qs)


async def test_worker_job_timeout_applies_to_plain_def(redis_client, aredis, qs):
    registry = HandlerRegistry()
    release = threading.Event()

    @registry.handler("slow")
    def slow(job):
        release.wait(10)

    queue = Queue(redis_client, settings=qs)
    job_id = queue.enqueue("slow", max_attempts=1).job_id
    try:
        async with running_worker(aredis, qs, registry, job_timeout_s=0.2):
            await eventually(lambda: status_of(redis_client, qs, job_id) == "dead", timeout_s=5)
    finally:
        release.set()
    assert "timed out after 0.2 s" in queue.get(job_id).last_error


async def test_retry_delays_are_jittered_inside_the_ceiling(redis_client, aredis, qs):
    registry = HandlerRegistry()
    backoff = Backoff(base_s=20.0, max_s=40.0)

    @registry.handler("fails", backoff=backoff)
    async def fails(job):
        raise RuntimeError("down")

    queue = Queue(redis_client, settings=qs)
    ids = [r.job_id for r in queue.enqueue_many([("fails", i) for i in range(20)])]
    snapshot: list[tuple[float, JobInfo]] = []

    def all_waiting_for_retry() -> bool:
        # One MULTI, so the retry set and the records are seen at the same instant: a job whose
        # jittered delay is near zero may already be promoted and run again a moment later.
        pipe = redis_client.pipeline(transaction=True)
        for job_id in ids:
            pipe.zscore(qs.keys.retry, job_id)
            pipe.hgetall(qs.keys.job(job_id))  # waiting to run: a Hash
        replies = pipe.execute()
        if any(score is None for score in replies[::2]):
            return False
        snapshot[:] = [(score, JobInfo.from_hash(fields))
                       for score, fields in zip(replies[::2], replies[1::2], strict=True)]
        return True

    async with running_worker(aredis, qs, registry, concurrency=8):
        await eventually(all_waiting_for_retry)
    delays = []
    for due_at_ms, info in snapshot:
        failed_at = info.history[-1]
        assert (failed_at.event, failed_at.error) == ("retrying", "RuntimeError: down")
        delay = due_at_ms - failed_at.at_ms
        assert 0 <= delay <= backoff.ceiling_ms(info.attempt), (info.attempt, delay)
        delays.append(delay)
    assert len(set(delays)) > 10  # full jitter spreads them out
    assert_invariants(redis_client, qs)


async def test_checkpointed_steps_are_skipped_on_replay(redis_client, aredis, qs):
    registry = HandlerRegistry()
    runs = {"charge": 0, "ship": 0, "email": 0}

    def action(name, value):
        def run():
            runs[name] += 1
            return value
        return run

    @registry.handler("order")
    async def order(job):
        receipt = await job.step("charge", action("charge", {"receipt": 7}))
        assert receipt == {"receipt": 7}
        if job.attempt == 1:
            raise Retry("crash after charging", delay=0)
        await job.step("ship", action("ship", "shipped"))

    @registry.handler("order_sync")
    def order_sync(job):
        job.step_blocking("email", action("email", 1))
        if job.attempt == 1:
            raise RuntimeError("flaky")

    queue = Queue(redis_client, settings=qs)
    a = queue.enqueue("order").job_id
    b = queue.enqueue("order_sync").job_id
    async with running_worker(aredis, qs, registry, backoff=Backoff(base_s=0.01, max_s=0.01)):
        await eventually(lambda: status_of(redis_client, qs, a) == status_of(redis_client, qs, b) == "done")
    assert runs == {"charge": 1, "ship": 1, "email": 1}
    assert queue.get(a).steps == {"charge": {"receipt": 7}, "ship": "shipped"}
    assert queue.get(a).attempt == 2 and queue.get(b).attempt == 2
    assert json.loads(read_record(redis_client, qs, b).get("step:email")) == 1


async def test_duplicate_by_done_key_is_acked_without_running(redis_client, aredis, qs):
    registry = HandlerRegistry()
    calls = []

    @registry.handler("pay")
    async def pay(job):
        calls.append(job.id)

    queue = Queue(redis_client, settings=qs)
    job_id = queue.enqueue("pay", idempotency_key="invoice-9").job_id
    # Another job with the same key finished while this one waited.
    redis_client.set(qs.keys.idempotency("invoice-9"), "earlier|done")
    async with running_worker(aredis, qs, registry):
        await eventually(lambda: status_of(redis_client, qs, job_id) == "done")
    assert calls == []
    assert queue.get(job_id).outcome == "duplicate"
    assert queue.stats().counters.get("duplicate") == 1
    assert_invariants(redis_client, qs)


async def test_a_blocking_step_runs_in_the_handlers_thread_while_the_worker_goes_on(
        redis_client, aredis, qs):
    """A ``step_blocking`` action longer than the lease: the worker's loop keeps renewing the
    lease and running other jobs meanwhile, so the step runs once and the job is done in its
    first attempt (the action used to run on the loop itself, stalling the whole worker until
    its leases expired and the step ran again elsewhere)."""
    registry = HandlerRegistry()
    step_threads: list[str] = []
    step_started = threading.Event()

    @registry.handler("charge")
    def charge(job):
        def slow_charge():
            step_threads.append(threading.current_thread().name)
            step_started.set()
            time.sleep(2.5)
            return "receipt"
        assert job.step_blocking("charge", slow_charge) == "receipt"

    @registry.handler("ping")
    async def ping(job):
        pass

    queue = Queue(redis_client, settings=qs)
    slow = queue.enqueue("charge").job_id
    async with running_worker(aredis, qs, registry, visibility_timeout_s=1.0):
        await eventually(step_started.is_set, message="the step to start")
        quick = queue.enqueue("ping").job_id
        await eventually(lambda: status_of(redis_client, qs, quick) == "done", timeout_s=2,
                         message="another job done while the step runs")
        assert status_of(redis_client, qs, slow) == "processing"
        await eventually(lambda: status_of(redis_client, qs, slow) == "done",
                         message="the job with the step")
    assert len(step_threads) == 1 and step_threads[0] != threading.main_thread().name
    assert queue.get(slow).attempt == 1
    assert queue.get(slow).steps == {"charge": "receipt"}
    assert_invariants(redis_client, qs)


async def test_a_blocking_step_in_an_async_handler_fails_the_run_instead_of_the_worker(
        redis_client, aredis, qs):
    """step_blocking waits for the worker's loop; called on that loop (an async def handler)
    it would wait for ever and stop every lease renewal: it raises instead."""
    registry = HandlerRegistry()

    @registry.handler("misused")
    async def misused(job):
        job.step_blocking("x", lambda: 1)

    queue = Queue(redis_client, settings=qs)
    job_id = queue.enqueue("misused", max_attempts=1).job_id
    async with running_worker(aredis, qs, registry):
        await eventually(lambda: status_of(redis_client, qs, job_id) == "dead",
                         message="the misused step to fail its run")
    assert "use `await job.step(...)`" in queue.get(job_id).last_error
