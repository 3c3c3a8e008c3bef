"""The worker never strands a lease, whatever a handler or a foreign record does.

Aspects: headers that are not a JSON object are ignored, not fatal; a handler raising an
unusable Retry is retried; an object with an async __call__ is awaited, not "acked" unrun; a
heartbeat reply about an old lease leaves the newer lease of the same job alone; a plain-def
handler past its timeout is failed at once but keeps its slot and its resource lock until the
thread returns; a handler raising SystemExit or KeyboardInterrupt fails its run and the worker
goes on (an ``antre worker`` subprocess: asyncio would re-raise them out of the loop).
"""

from __future__ import annotations

import asyncio
import logging
import signal
import subprocess
import sys
import threading
import time

import pytest
from antre import Backoff, HandlerRegistry, Job, Queue, QueueSettings, Retry, errors
from antre.metrics import WorkerMetrics
from antre.worker import IDLE_WAIT_S
from invariants import as_queued_hash, assert_invariants, read_record
from redis_servers import child_env, wait_until
from worker_harness import eventually, running_worker, status_of


async def test_foreign_headers_do_not_stop_the_job(redis_client, aredis, qs):
    registry = HandlerRegistry()
    seen = []

    @registry.handler("t")
    async def record(job: Job) -> None:
        seen.append(job.headers)

    queue = Queue(redis_client, settings=qs)
    ids = [queue.enqueue("t").job_id for _ in range(3)]
    for job_id, headers in zip(ids, ("traceparent=00-abc", "[1, 2]", '{"a": 1}'), strict=True):
        as_queued_hash(redis_client, qs, job_id)
        redis_client.hset(qs.keys.job(job_id), "headers", headers)
    async with running_worker(aredis, qs, registry):
        await eventually(lambda: all(status_of(redis_client, qs, i) == "done" for i in ids))
    assert sorted(seen, key=len) == [{}, {}, {"a": "1"}]
    assert_invariants(redis_client, qs)


async def test_an_unusable_retry_is_a_failure_not_a_stuck_job(redis_client, aredis, qs):
    registry = HandlerRegistry()

    @registry.handler("t")
    async def retry_forever(job: Job) -> None:
        raise Retry("later", delay=float("inf"))

    queue = Queue(redis_client, settings=qs)
    job_id = queue.enqueue("t", max_attempts=1).job_id
    async with running_worker(aredis, qs, registry):
        await eventually(lambda: status_of(redis_client, qs, job_id) == "dead")
    assert "Retry.delay: got inf" in queue.get(job_id).last_error
    assert_invariants(redis_client, qs)


@pytest.mark.parametrize("delay", [-1, 1e300, float("nan"), "soon"])
def test_a_retry_delay_outside_ten_years_is_refused_with_one_line(delay):
    with pytest.raises(errors.InvalidArgument) as caught:
        Retry("later", delay=delay)
    assert str(caught.value).startswith(f"Retry.delay: got {delay!r}; must be a number of "
                                        "seconds from 0 to 315,360,000 (ten years)")


async def test_an_object_with_async_call_is_awaited(redis_client, aredis, qs):
    ran = []

    class Charge:
        async def __call__(self, job: Job) -> None:
            await asyncio.sleep(0)
            ran.append(job.id)

    registry = HandlerRegistry()
    registry.register("charge", Charge())
    queue = Queue(redis_client, settings=qs)
    job_id = queue.enqueue("charge").job_id
    async with running_worker(aredis, qs, registry):
        await eventually(lambda: status_of(redis_client, qs, job_id) == "done")
    assert ran == [job_id]


async def test_a_stale_heartbeat_reply_leaves_the_newer_lease_alone(redis_client, aredis, qs):
    registry = HandlerRegistry()
    release = asyncio.Event()

    @registry.handler("t")
    async def wait(job: Job) -> None:
        await release.wait()

    queue = Queue(redis_client, settings=qs)
    job_id = queue.enqueue("t").job_id
    async with running_worker(aredis, qs, registry) as worker:
        # The record says processing as soon as the claim script ran; the worker holds the run
        # once it has read the claim's reply.
        await eventually(lambda: worker.in_flight == 1)
        lease = int(read_record(redis_client, qs, job_id).get("lease"))
        worker.held.lose(job_id, lease - 1)  # the reply about an older lease arrives late
        assert worker.in_flight == 1
        release.set()
        await eventually(lambda: status_of(redis_client, qs, job_id) == "done")
    assert queue.get(job_id).attempt == 1


async def test_a_thread_past_its_timeout_keeps_its_slot_and_its_lock(redis_client, aredis, qs):
    registry = HandlerRegistry()
    hang = threading.Event()
    started = []

    @registry.handler("stuck")
    def stuck(job: Job) -> None:
        started.append(job.id)
        hang.wait(20)

    @registry.handler("quick")
    def quick(job: Job) -> None:
        started.append(job.id)

    queue = Queue(redis_client, settings=qs)
    stuck_id = queue.enqueue("stuck", resource_key="acct", max_attempts=1).job_id
    try:
        async with running_worker(aredis, qs, registry, concurrency=1, job_timeout_s=0.2) as worker:
            await eventually(lambda: status_of(redis_client, qs, stuck_id) == "dead")
            assert "timed out after 0.2 s" in queue.get(stuck_id).last_error
            # The thread still runs: its resource stays locked and the only slot stays busy.
            assert redis_client.exists(qs.keys.resource_lock("acct"))
            quick_id = queue.enqueue("quick").job_id
            # The only slot stays busy: the next job is not started (nor prefetched: a worker
            # holds no job ahead for work that takes far longer than a claim's round trip).
            await eventually(lambda: worker.threads.overdue == 1 and not worker._slot_freed.is_set())
            assert not worker._waiting
            assert status_of(redis_client, qs, quick_id) == "queued" and started == [stuck_id]
            hang.set()
            await eventually(lambda: status_of(redis_client, qs, quick_id) == "done")
    finally:
        hang.set()
    assert_invariants(redis_client, qs, check_locks=False)


async def test_jobs_waiting_for_a_resource_follow_each_other_closely(redis_client, aredis, qs):
    """A claim that only deferred jobs tells the worker when the next one is due, so a line of
    jobs on one resource drains at the lock_defer pace, not one idle wait (1 s) per job."""
    registry = HandlerRegistry()

    @registry.handler("t")
    async def noop(job: Job) -> None:
        pass

    queue = Queue(redis_client, settings=qs)
    queue.enqueue_many([{"type": "t", "resource_key": "acct"} for _ in range(20)])
    # No reaper pass to promote the deferred jobs: only the claim's next-due report wakes it.
    async with running_worker(aredis, qs, registry, concurrency=8, lock_defer_s=0.02,
                              reaper_interval_s=60):
        started = asyncio.get_running_loop().time()
        await eventually(lambda: queue.stats().counters.get("done", 0) == 20, timeout_s=15)
        elapsed = asyncio.get_running_loop().time() - started
    assert elapsed < 2, f"20 jobs on one resource took {elapsed:.1f} s"
    assert_invariants(redis_client, qs)


async def test_health_reports_a_dead_loop(redis_client, aredis, qs):
    registry = HandlerRegistry()
    async with running_worker(aredis, qs, registry) as worker:
        await eventually(lambda: worker._loops)
        assert worker.healthy()
        reaper_loop = worker._loops[-1]

        def died() -> bool:
            # As if the reaper loop had died of a defect. A cancel landing inside a redis-py
            # call can be swallowed (worker.run asks again for the same reason): ask each poll.
            reaper_loop.cancel()
            return not worker.healthy()

        await eventually(died, timeout_s=2)


async def test_a_timed_out_thread_and_its_retry_never_overlap_on_the_resource(redis_client, aredis,
                                                                             qs):
    registry = HandlerRegistry()
    spans: list[tuple[int, float, float]] = []

    @registry.handler("print")
    def print_document(job: Job) -> None:
        began = time.monotonic()
        time.sleep(1.0 if job.attempt == 1 else 0.0)
        spans.append((job.attempt, began, time.monotonic()))

    queue = Queue(redis_client, settings=qs)
    job_id = queue.enqueue("print", resource_key="printer", max_attempts=3).job_id
    async with running_worker(aredis, qs, registry, concurrency=2, job_timeout_s=0.2,
                              visibility_timeout_s=1.5, lock_defer_s=0.05,
                              backoff=Backoff(base_s=0.01, max_s=0.01)):
        await eventually(lambda: status_of(redis_client, qs, job_id) == "done", timeout_s=10)
    (first, second) = sorted(spans)
    assert first[0] == 1 and second[0] == 2
    assert second[1] >= first[2], "attempt 2 started while attempt 1's thread still ran"


async def test_duplicates_are_logged_and_counted(redis_client, aredis, qs, caplog):
    caplog.set_level(logging.INFO, logger="antre.lifecycle")
    registry = HandlerRegistry()
    ran = []

    @registry.handler("t")
    async def record(job: Job) -> None:
        ran.append(job.id)

    queue = Queue(redis_client, settings=qs)
    first = queue.enqueue("t", idempotency_key="order-1").job_id
    metrics = WorkerMetrics(qs.name)
    async with running_worker(aredis, qs, registry, metrics=metrics):
        await eventually(lambda: status_of(redis_client, qs, first) == "done")
    # A second job with the completed key (its dedupe window on enqueue was bypassed), changed
    # while no worker runs: an idle worker claims a new job within a round trip.
    second = queue.enqueue("t", idempotency_key="order-2", resource_key="invoice-7").job_id
    as_queued_hash(redis_client, qs, second)
    redis_client.hset(qs.keys.job(second), "idempotency_key", "order-1")
    async with running_worker(aredis, qs, registry, metrics=metrics):
        await eventually(lambda: status_of(redis_client, qs, second) == "done")
    assert ran == [first]
    # The same fields as every other lifecycle line: the runs it had, its resource.
    [line] = [r for r in caplog.records if getattr(r, "event", None) == "duplicate"]
    assert (line.job_id, line.job_type, line.idempotency_key, line.attempt,
            line.resource_key) == (second, "t", "order-1", 0, "invoice-7")
    assert metrics.jobs.labels(qs.name, "t", "duplicate")._value.get() == 1


async def test_an_idle_worker_blocks_instead_of_polling(redis_client, aredis, qs):
    """Issue 2: a blocking wait when the queue is empty. Over 1.5 idle seconds the worker
    makes about one claim call per second (the BLMOVE timeout), not hundreds."""
    registry = HandlerRegistry()

    @registry.handler("t")
    async def noop(job: Job) -> None:
        pass

    def calls(command: str) -> int:
        return int(redis_client.info("commandstats").get(f"cmdstat_{command}", {}).get("calls", 0))

    waits_at_start = calls("blmove")
    async with running_worker(aredis, qs, registry, reaper_interval_s=60,
                              visibility_timeout_s=30):
        # Past start-up (registration, first claim): the worker waits on the empty queue.
        await eventually(lambda: calls("blmove") > waits_at_start, message="the first wait")
        scripts_before, waits_before = calls("evalsha"), calls("blmove")
        await asyncio.sleep(1.5 * IDLE_WAIT_S)  # idle: one and a half blocking waits' time
        scripts_made, waits_made = calls("evalsha") - scripts_before, calls("blmove") - waits_before
    assert scripts_made <= 4, f"{scripts_made} script calls in 1.5 idle seconds"
    assert 1 <= waits_made <= 3


async def test_a_thread_past_its_timeout_keeps_its_resource_through_many_leases(redis_client,
                                                                                aredis, qs):
    """Issue 10.1: the worker stopped extending the lock of a run failed at its job timeout,
    so with a 1 s lease, a 0.3 s job timeout and a handler that sleeps 2.5 s, three runs of one
    job were inside the handler on one resource at once. The lock is now extended for as long
    as the thread runs, and freed when it returns."""
    registry = HandlerRegistry()
    inside: list[int] = []
    most_inside = []
    lock = threading.Lock()

    @registry.handler("print")
    def print_document(job: Job) -> None:
        with lock:
            inside.append(job.attempt)
            most_inside.append(len(inside))
        time.sleep(2.5 if job.attempt == 1 else 0.0)
        with lock:
            inside.remove(job.attempt)

    queue = Queue(redis_client, settings=qs)
    job_id = queue.enqueue("print", resource_key="printer", max_attempts=3).job_id
    async with running_worker(aredis, qs, registry, concurrency=3, job_timeout_s=0.3,
                              visibility_timeout_s=1.0, lock_defer_s=0.05,
                              backoff=Backoff(base_s=0.01, max_s=0.01)) as worker:
        await eventually(lambda: worker.threads.overdue == 1, message="attempt 1 overdue")
        # Through more than two leases the lock stays attempt 1's, and attempt 2 waits.
        await eventually(lambda: queue.get(job_id).history[-1].event == "deferred")
        await eventually(lambda: worker.threads.overdue == 0, timeout_s=10,
                         message="attempt 1's thread returned")
        await eventually(lambda: status_of(redis_client, qs, job_id) == "done", timeout_s=10)
    assert max(most_inside) == 1, f"runs inside the handler at once: {most_inside}"
    info = queue.get(job_id)
    assert info.attempt == 2 and redis_client.exists(qs.keys.resource_lock("printer")) == 0
    assert_invariants(redis_client, qs)


async def test_a_stop_with_a_thread_still_running_keeps_its_lock(redis_client, aredis, qs):
    """Issue 10.1: release at the end of the grace period freed the lock of a thread that
    could not be stopped; the next run on the resource could start beside it."""
    registry = HandlerRegistry()
    hang = threading.Event()

    @registry.handler("stuck")
    def stuck(job: Job) -> None:
        hang.wait(20)

    queue = Queue(redis_client, settings=qs)
    job_id = queue.enqueue("stuck", resource_key="acct").job_id
    try:
        async with running_worker(aredis, qs, registry, grace_period_s=0.1) as worker:
            await eventually(lambda: worker.in_flight == 1)
        info = queue.get(job_id)
        assert (info.status, info.history[-1].event) == ("queued", "released")
        assert redis_client.get(qs.keys.resource_lock("acct")) == f"{job_id}:1"
        assert read_record(redis_client, qs, job_id).get("lock_kept") == "1"
    finally:
        hang.set()
    assert_invariants(redis_client, qs)


@pytest.mark.parametrize("timeout", [None, 60.0])
async def test_a_stop_keeps_extending_the_lock_of_an_async_handler_still_going(
        redis_client, aredis, qs, timeout):
    """The stop's release keeps the lock of an async handler that carries on after its
    cancellation, and the heartbeat extends it, but the heartbeat stopped with the worker's
    other loops while the handler went on (``antre worker``'s asyncio.run waits for it): the
    lock expired one lease later and the resource's next run started beside the handler. The
    worker now waits for such handlers, extending their locks, before its loops stop. With a job
    timeout, asyncio.wait_for ran the handler in a task of its own (Python 3.11): the stop's
    second cancellation ended the run's task, the handler going on, and freed the lock at once."""
    lease_s = 2.0
    registry = HandlerRegistry()
    finish = asyncio.Event()
    spans: list[tuple[float, float]] = []
    starts: list[float] = []

    @registry.handler("stubborn", timeout=timeout)
    async def stubborn(job: Job) -> None:
        began = time.monotonic()
        starts.append(began)
        while len(starts) == 1 and not finish.is_set():
            try:
                await finish.wait()
            except asyncio.CancelledError:
                continue
        spans.append((began, time.monotonic()))

    queue = Queue(redis_client, settings=qs)
    job_id = queue.enqueue("stubborn", resource_key="acct").job_id
    lock = qs.keys.resource_lock("acct")
    stopping = running_worker(aredis, qs, registry, worker_id="w-stopped",
                              visibility_timeout_s=lease_s, grace_period_s=0.1)
    try:
        worker = await stopping.__aenter__()
        await eventually(lambda: worker.in_flight == 1 and len(starts) == 1)
        # Another worker, waiting for the job's next run (a lock deferral re-checks at once).
        async with running_worker(aredis, qs, registry, worker_id="w-other",
                                  visibility_timeout_s=lease_s):
            worker.stop()
            await eventually(lambda: any(e.event == "released"
                                         for e in queue.get(job_id).history),
                             message="the job released")
            # For two leases and more after the stop, the handler still going: the lock stays
            # its run's, and the job's next run does not start.
            until = time.monotonic() + lease_s * 2.5
            while time.monotonic() < until:
                assert redis_client.get(lock) == f"{job_id}:1", "kept while the handler goes on"
                assert len(starts) == 1, "the next run started beside the handler still going"
                await asyncio.sleep(0.05)
            finish.set()
            await stopping.__aexit__(None, None, None)
            await eventually(lambda: status_of(redis_client, qs, job_id) == "done",
                             message="the job run again once the handler ended")
    finally:
        finish.set()
    first, second = sorted(spans)
    assert second[0] >= first[1], f"two runs on the resource at once: {spans}"
    assert_invariants(redis_client, qs)



async def test_a_stop_renews_the_leases_it_is_about_to_give_back(redis_client, aredis, qs):
    """A stop marks the runs it gives back released, then gives cancelled async handlers a
    second to end before the release; the heartbeat skipped released runs, so with a lease that
    short (the least allowed) the lease and its resource lock expired first: the reaper
    requeued the job (its attempt spent), the run was lease_lost, and the lock was not kept for
    the handler still going."""
    registry = HandlerRegistry()
    finish = asyncio.Event()

    @registry.handler("stubborn")
    async def stubborn(job: Job) -> None:
        while not finish.is_set():
            try:
                await finish.wait()
            except asyncio.CancelledError:
                continue

    queue = Queue(redis_client, settings=qs)
    job_id = queue.enqueue("stubborn", resource_key="acct").job_id
    stopping = running_worker(aredis, qs, registry, visibility_timeout_s=1.0,
                              grace_period_s=0.1)
    try:
        worker = await stopping.__aenter__()
        await eventually(lambda: worker.in_flight == 1)
        worker.stop()
        await eventually(lambda: worker.in_flight == 0, message="the job given back")
        info = queue.get(job_id)
        events = [e.event for e in info.history if e.event != "extended"]
        assert events == ["enqueued", "claimed", "released"], events
        assert info.attempt == 0, "a stop's release refunds the attempt"
        assert redis_client.get(qs.keys.resource_lock("acct")) == f"{job_id}:1"
    finally:
        finish.set()
        await stopping.__aexit__(None, None, None)
    assert_invariants(redis_client, qs)

EXITING_HANDLERS = """\
import sys

import antre


@antre.handler("exit_def")
def exit_def(job):
    sys.exit(3)  # argparse's error(), a CLI's main() reused as a handler...


@antre.handler("exit_async")
async def exit_async(job):
    raise KeyboardInterrupt


@antre.handler("exit_coroutine_from_def")
def exit_coroutine_from_def(job):
    return exit_async(job)  # a sync wrapper handing back a coroutine


@antre.handler("ok")
def ok(job):
    pass
"""


@pytest.mark.parametrize("job_type", ["exit_def", "exit_async", "exit_coroutine_from_def"])
@pytest.mark.parametrize("job_timeout", [None, "30"])
def test_a_handler_raising_system_exit_fails_its_job_not_the_worker(redis_client, redis_url,
                                                                    tmp_path, job_type,
                                                                    job_timeout):
    """A SystemExit or KeyboardInterrupt raised by a handler is that run's failure. asyncio
    re-raises both out of the event loop: the whole worker process exited with the handler's
    code, its other runs left to expire, the job neither retried nor dead-lettered."""
    (tmp_path / "exiting_jobs.py").write_text(EXITING_HANDLERS)
    qs = QueueSettings(name="exits")
    queue = Queue(redis_client, settings=qs)
    job_id = queue.enqueue(job_type, max_attempts=1).job_id
    env = {**child_env(), **({"ANTRE_JOB_TIMEOUT": job_timeout} if job_timeout else {})}
    proc = subprocess.Popen([sys.executable, "-m", "antre", "worker", "--handlers",
                             "exiting_jobs", "--redis-url", redis_url, "--queue", qs.name],
                            cwd=tmp_path, env=env, stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, text=True)
    try:
        wait_until(lambda: queue.get(job_id).status == "dead" or proc.poll() is not None,
                   timeout_s=20, message="the job failed, or the worker gone")
        assert proc.poll() is None, "the handler's exit ended the worker"
        info = queue.get(job_id)
        assert info.status == "dead", info
        assert info.last_error in ("SystemExit: 3", "KeyboardInterrupt: "), info.last_error
        after = queue.enqueue("ok").job_id
        wait_until(lambda: queue.get(after).status == "done", timeout_s=20,
                   message="the next job done by the same worker")
    finally:
        proc.send_signal(signal.SIGTERM)
        _, stderr = proc.communicate(timeout=30)
    assert proc.returncode == 0, stderr
    assert_invariants(redis_client, qs)
