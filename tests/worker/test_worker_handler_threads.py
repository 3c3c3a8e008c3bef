"""A plain ``def`` handler's thread, once it returns, starts the next prefetched job itself.

Covers: the next job starts in the thread that freed while the event loop cannot run (so no
hop through the loop is needed), and runs once under its own lease; a stop takes the armed job
back, so a thread returning after it starts nothing and the job is released unstarted with its
attempt refunded; a thread past its timeout that returns keeps its run's resource lock until it
returns, even when it goes straight on to the next job.
"""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest
from antre import HandlerRegistry, Job, Queue
from antre.handler_threads import HandlerThreads, ThreadTimeout
from antre.jobs import ClaimedJob
from antre.runs import Run
from invariants import assert_invariants
from redis_servers import wait_until
from worker_harness import eventually, running_worker, status_of

#: Short jobs that come first, so the worker has measured its pace and prefetches (none is
#: held ahead before that).
WARM_UP = 30


class Gated:
    """Handlers: ``quick`` returns at once; ``gated`` waits for the gate; ``next`` returns at
    once. The last two note when and in which thread they started."""

    def __init__(self) -> None:
        self.registry = HandlerRegistry()
        self.gate = threading.Event()
        self.started: dict[str, tuple[float, str]] = {}

        @self.registry.handler("quick")
        def quick(job: Job) -> None:
            pass

        @self.registry.handler("gated")
        def gated(job: Job) -> None:
            self._note(job)
            self.gate.wait(20)

        @self.registry.handler("next")
        def next_job(job: Job) -> None:
            self._note(job)

    def _note(self, job: Job) -> None:
        self.started[job.id] = (time.monotonic(), threading.current_thread().name)


def keep_prefetched(worker: Any) -> None:
    """The next job stays armed behind the gated one: not handed back as work that turned long
    (antre.prefetch), which these tests are not about."""
    worker.prefetch.hand_back_after_s = lambda: 3600.0


def _enqueue_gated_then_next(queue: Queue) -> tuple[str, str]:
    results = queue.enqueue_many([{"type": "quick"}] * WARM_UP + [{"type": "gated"}, {"type": "next"}])
    return results[-2].job_id, results[-1].job_id


async def test_a_returning_thread_starts_the_next_job_without_the_loop(redis_client, aredis, qs):
    handlers = Gated()
    queue = Queue(redis_client, settings=qs)
    try:
        async with running_worker(aredis, qs, handlers.registry, concurrency=1, prefetch=1) as worker:
            keep_prefetched(worker)
            gated_id, next_id = _enqueue_gated_then_next(queue)
            await eventually(lambda: gated_id in handlers.started and worker.threads.armed == 1,
                             message="the gated job running, the next one prefetched and armed")
            assert status_of(redis_client, qs, next_id) == "processing"  # leased while it waits
            handlers.gate.set()
            # The event loop is blocked from here on (a blocking call in a coroutine): only the
            # thread that frees can start the next job.
            wait_until(lambda: next_id in handlers.started, timeout_s=5, interval_s=0.005,
                       message="the next job to start while the loop was blocked")
            assert handlers.started[next_id][1] == handlers.started[gated_id][1], \
                "in the thread the gated job freed"
            await eventually(lambda: status_of(redis_client, qs, next_id) == "done")
    finally:
        handlers.gate.set()
    info = queue.get(next_id)
    assert [e.event for e in info.history if e.event != "extended"] == [
        "enqueued", "claimed", "acked"]
    assert info.attempt == 1
    assert_invariants(redis_client, qs)


async def test_a_stop_takes_the_armed_job_back_before_a_thread_can_start_it(redis_client, aredis,
                                                                            qs):
    handlers = Gated()
    queue = Queue(redis_client, settings=qs)
    try:
        async with running_worker(aredis, qs, handlers.registry, concurrency=1, prefetch=1,
                                  grace_period_s=5.0) as worker:
            keep_prefetched(worker)
            gated_id, next_id = _enqueue_gated_then_next(queue)
            await eventually(lambda: gated_id in handlers.started and worker.threads.armed == 1,
                             message="the gated job running, the next one prefetched and armed")
            worker.stop()  # SIGTERM
            assert worker.threads.armed == 0
            handlers.gate.set()  # the running job ends within the grace period
            await eventually(lambda: status_of(redis_client, qs, gated_id) == "done")
    finally:
        handlers.gate.set()
    assert next_id not in handlers.started, "nothing starts a prefetched job after a stop"
    info = queue.get(next_id)
    assert info.status == "queued"
    assert [e.event for e in info.history if e.event != "extended"] == [
        "enqueued", "claimed", "released"]
    assert info.attempt == 0, "the release refunds the attempt of a job never started"
    assert_invariants(redis_client, qs)


def _run(job_id: str) -> Run:
    return Run(ClaimedJob(id=job_id, type="t", payload_json="null", attempt=1, max_attempts=3,
                          lease=1, idempotency_key=None, resource_key="acct", created_at_ms=0,
                          headers_json=""))


async def test_a_kept_lock_is_freed_when_the_thread_returns_though_it_goes_on():
    """Issue 10.1 with a thread that starts the next job: the lock of the run it overran is
    held until the handler returns, not until the thread is idle, nor before."""
    gate = threading.Event()
    freed: list[Run] = []
    started: list[tuple[Run, Any]] = []
    threads = HandlerThreads(1, on_slot_freed=lambda: None, on_lock_freed=freed.append,
                             on_started=lambda run, job, returned, at: started.append((run, returned)))
    overran, following = _run("a"), _run("b")
    names: dict[str, str] = {}

    def note(name: str) -> None:
        names[name] = threading.current_thread().name

    try:
        returned = threads.start(overran, lambda job: (note("a"), gate.wait(20)), None)
        with pytest.raises(ThreadTimeout):
            await threads.wait(overran, returned, 0.05)
        threads.keep_lock(overran)  # the worker failed the run keeping the lock
        threads.arm(following, lambda job: note("b"), None)
        assert threads.running(overran) and threads.overdue == 1
        assert threads.kept_locks() == [("acct", "a:1")] and not freed
        gate.set()
        await eventually(lambda: freed == [overran], message="the lock freed on the return")
        assert [run for run, _ in started] == [following]
        await threads.wait(following, started[0][1], 5)
        assert names["b"] == names["a"], "the thread that returned ran the next job"
        assert not threads.running(overran) and threads.overdue == 0 and not threads.kept_locks()
    finally:
        gate.set()
        threads.shutdown()


async def test_a_run_a_thread_took_counts_as_running_before_the_loop_learns_of_it():
    """A returning thread takes an armed run and starts its handler, then tells the loop in a
    callback. In between, the loop may give the run back (a late renewal's give-back, after
    abandoning it at its deadline): taken then for a run that never started, it was released
    unstarted and its lock freed while its handler ran, and the resource's next job could start
    beside it. The run counts as running from the moment a thread takes it, and a lock kept
    for it then is freed when its handler returns."""
    first_may_return, taken_runs, second_may_return = (threading.Event() for _ in range(3))
    freed: list[Run] = []
    started: list[Run] = []
    threads = HandlerThreads(1, on_slot_freed=lambda: None, on_lock_freed=freed.append,
                             on_started=lambda run, job, returned, at: started.append(run))
    first, second = _run("a"), _run("b")

    def runs_second(job: Any) -> None:
        taken_runs.set()
        second_may_return.wait(20)

    try:
        threads.start(first, lambda job: first_may_return.wait(20), None)
        threads.arm(second, runs_second, None)
        first_may_return.set()
        # The loop does not run from here until the asserts are done: the thread's callback
        # telling it of the start waits, as it would behind a busy loop.
        assert taken_runs.wait(5), "the returning thread started the armed run"
        assert not started, "the loop has not learnt of the start yet"
        assert threads.running(second)
        assert not threads.disarm(second), "nothing to take back: it runs"
        threads.keep_lock(second)  # released keeping its lock, as a give-back does
        assert not freed, "the lock of a running handler is kept"
        await eventually(lambda: started == [second], message="the loop learns of the start")
        assert threads.running(second) and not freed
        second_may_return.set()
        await eventually(lambda: freed == [second], message="the lock freed on its return")
        assert not threads.running(second)
    finally:
        first_may_return.set()
        second_may_return.set()
        threads.shutdown()
