"""A fail or release that keeps a resource lock for a handler still going, whose reply is lost
after Redis ran it (the connection cut before the reply came back): the worker must still learn
that it keeps the lock, extend it while the handler goes on, and at a stop wait for that handler.

Outages.settle sends the call again. fail.lua and release.lua refused that second sending (the
job no longer processing), so the worker took the run for lost: the heartbeat never extended
the lock, it expired a lease later, and the resource's next job ran beside the handler still
going (a thread past its job timeout; an async handler that carries on after a stop's
cancellation, which the worker did not wait for either). The scripts now answer a call sent
again with its first sending's answer (tests/protocol), and the worker keeps tracking the lock
of a keep-lock call whose answer it never got.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
from typing import Any

import pytest
from antre import HandlerRegistry, Job, Queue
from antre.connection import connect_async
from antre.errors import RedisUnavailable
from antre.failures import Failure
from antre.handler_threads import HandlerThreads, ThreadTimeout
from antre.held_runs import HeldRuns
from antre.jobs import ClaimedJob
from antre.outcomes import Outcomes
from antre.protocol.scripts import load as load_script
from antre.runs import Run
from antre.settings import QueueSettings, WorkerSettings
from antre.settling import Settler
from antre.worker import Worker
from invariants import assert_invariants
from reply_cutter import ReplyCutter
from worker_harness import FAST, eventually, running_worker, status_of

#: Short leases: each test watches a kept lock outlive the lease it had when it was kept.
LEASE_S = 1.0


def outcomes_of(caplog: Any, *events: str) -> list[tuple[str, str]]:
    """The lifecycle lines of these events, as (event, job id)."""
    return [(r.event, r.job_id) for r in caplog.records
            if r.name == "antre.lifecycle" and getattr(r, "event", None) in events]


def server_ms(redis_client: Any) -> int:
    seconds, micros = redis_client.time()
    return int(seconds) * 1000 + int(micros) // 1000


def redis_port(redis_url: str) -> int:
    return int(redis_url.rsplit(":", 1)[1].split("/")[0])


async def past_the_lease_it_had(redis_client: Any, since_ms: int) -> None:
    """Waits until the Redis clock is a lease and a half past ``since_ms``: a lock whose TTL was
    at most a lease then has expired unless something extended it."""
    await eventually(lambda: server_ms(redis_client) > since_ms + LEASE_S * 1500,
                     timeout_s=LEASE_S * 5, message="the kept lock's first lease ran out")


async def test_a_fail_keeping_the_lock_whose_reply_is_lost_keeps_it(redis_client, redis_url, qs,
                                                                    caplog):
    """A plain ``def`` handler overruns its job timeout: the fail keeps its lock, Redis runs it,
    the reply is lost, and the call sent again found the job dead and refused it. The worker
    logged the run lost, never extended the lock, and job B on the resource ran beside A's
    thread a lease later."""
    caplog.set_level(logging.INFO, logger="antre.lifecycle")
    registry = HandlerRegistry()
    a_may_return, a_running = threading.Event(), threading.Event()
    overlap: list[str] = []

    @registry.handler("stuck")
    def stuck(job: Job) -> None:
        a_running.set()
        a_may_return.wait(30)  # past its job timeout: a thread that cannot be stopped

    @registry.handler("next")
    def next_job(job: Job) -> None:
        if not a_may_return.is_set():
            overlap.append(job.id)

    queue = Queue(redis_client, settings=qs)
    lock = qs.keys.resource_lock("acct")
    fail = load_script("fail")
    redis_client.script_load(fail.text)  # EVALSHA answers at once: the marker is that call's
    async with ReplyCutter(redis_port(redis_url)) as cutter:
        client = connect_async(cutter.url)
        try:
            async with running_worker(client, qs, registry, visibility_timeout_s=LEASE_S,
                                      job_timeout_s=0.2, concurrency=2,
                                      lock_defer_s=0.05) as worker:
                cutter.hold_replies_after(fail.sha.encode())
                a = queue.enqueue("stuck", resource_key="acct", max_attempts=1).job_id
                await eventually(a_running.is_set, message="A's thread running")
                b = queue.enqueue("next", resource_key="acct").job_id
                await eventually(lambda: status_of(redis_client, qs, a) == "dead",
                                 message="A failed at its timeout, in Redis")
                failed_at = server_ms(redis_client)
                await asyncio.wait_for(cutter.holding.wait(), 5)
                cutter.cut()  # the fail ran; its reply is lost
                await eventually(lambda: outcomes_of(caplog, "dead", "lease_lost"),
                                 message="the fail sent again was answered")
                assert outcomes_of(caplog, "dead", "lease_lost") == [("dead", a)]
                assert worker.settler.kept_locks() == [("acct", f"{a}:1")]
                await past_the_lease_it_had(redis_client, failed_at)
                assert redis_client.get(lock) == f"{a}:1", "extended while A's thread runs"
                assert status_of(redis_client, qs, b) == "scheduled" and overlap == []
                a_may_return.set()
                await eventually(lambda: status_of(redis_client, qs, b) == "done",
                                 message="B ran once A's thread returned")
        finally:
            a_may_return.set()
            await client.aclose()
    assert overlap == [], "B ran while A's thread still held the resource"
    assert_invariants(redis_client, qs)


async def test_a_stop_whose_release_reply_is_lost_keeps_the_lock_and_waits_for_the_handler(
        redis_client, redis_url, qs, caplog):
    """README, SIGTERM: an ``async def`` handler that catches its cancellation and carries on
    keeps its resource lock until it ends, and the worker waits for it before it exits. With the
    release's reply lost, the call sent again was answered 0 (the job queued already): the
    worker neither kept the lock nor waited for the handler."""
    caplog.set_level(logging.INFO, logger="antre.lifecycle")
    registry = HandlerRegistry()
    going, finish = asyncio.Event(), asyncio.Event()

    @registry.handler("stubborn")
    async def stubborn(job: Job) -> None:
        going.set()
        while not finish.is_set():
            with contextlib.suppress(asyncio.CancelledError):  # carries on
                await finish.wait()

    queue = Queue(redis_client, settings=qs)
    lock = qs.keys.resource_lock("acct")
    release = load_script("release")
    redis_client.script_load(release.text)
    async with ReplyCutter(redis_port(redis_url)) as cutter:
        client = connect_async(cutter.url)
        worker = Worker(client, qs, WorkerSettings(**{**FAST, "visibility_timeout_s": LEASE_S,
                                                      "grace_period_s": 0.1}),
                        registry, worker_id="w1")
        task = asyncio.create_task(worker.run())
        try:
            a = queue.enqueue("stubborn", resource_key="acct").job_id
            await asyncio.wait_for(going.wait(), 10)
            cutter.hold_replies_after(release.sha.encode())
            worker.stop()
            await eventually(lambda: status_of(redis_client, qs, a) == "queued",
                             message="the release ran in Redis")
            released_at = server_ms(redis_client)
            await asyncio.wait_for(cutter.holding.wait(), 5)
            cutter.cut()
            await eventually(lambda: outcomes_of(caplog, "released", "lease_lost"),
                             message="the release sent again was answered")
            assert outcomes_of(caplog, "released", "lease_lost") == [("released", a)]
            assert worker.settler.kept_locks() == [("acct", f"{a}:1")]
            await past_the_lease_it_had(redis_client, released_at)
            assert not task.done(), "the worker waits for the handler still going"
            assert redis_client.get(lock) == f"{a}:1", "extended while the handler goes on"
        finally:
            finish.set()
            await asyncio.wait_for(task, 15)
            await client.aclose()
    assert redis_client.get(lock) is None, "freed once the handler ended"
    assert_invariants(redis_client, qs)


# -- the answer never came: the lock is tracked all the same -------------------------------


class Unreachable:
    """Outages whose settle calls all give up, as after a reply lost and Redis away for the
    rest of the call's budget: whether the call ran is unknown."""

    async def settle(self, op: Any, **_: Any) -> Any:
        raise RedisUnavailable(f"{op.script.name} gave up: connection lost")


def settler_for(threads: HandlerThreads, qs: QueueSettings) -> Settler:
    outcomes = Outcomes(qs.name, "w1", None)
    return Settler(None, qs, WorkerSettings(**FAST), worker_id="w1",
                   outages=Unreachable(),  # type: ignore[arg-type]
                   outcomes=outcomes, held=HeldRuns(outcomes, lease_s=5.0), threads=threads)


def a_run(job_id: str) -> Run:
    return Run(ClaimedJob(id=job_id, type="t", payload_json="null", attempt=1, max_attempts=3,
                          lease=1, idempotency_key=None, resource_key="acct", created_at_ms=0,
                          headers_json=""))


async def test_a_keep_lock_fail_whose_answer_never_came_keeps_tracking_the_lock(qs):
    """The fail may have kept the lock in Redis: untracked, it would expire while the thread
    runs. Tracked, the thread's return frees it."""
    freed: list[Run] = []
    threads = HandlerThreads(1, on_slot_freed=lambda: None, on_lock_freed=freed.append,
                             on_started=lambda *_: None)
    gate = threading.Event()
    run = a_run("a")
    try:
        returned = threads.start(run, lambda job: gate.wait(20), None)
        with pytest.raises(ThreadTimeout):
            await threads.wait(run, returned, 0.01)
        await settler_for(threads, qs).fail(run, Failure("timed out", keep_lock=True),
                                            WorkerSettings().backoff)
        assert threads.kept_locks() == [("acct", "a:1")]
        gate.set()
        await eventually(lambda: freed == [run], message="the lock freed on the return")
    finally:
        gate.set()
        threads.shutdown()


async def test_a_stop_whose_release_answer_never_came_waits_for_the_handler_still_going(qs):
    """The release may have kept the lock: the handler going on after its cancellation is
    waited for at the stop, its lock extended meanwhile, as when the release answered."""
    threads = HandlerThreads(1, on_slot_freed=lambda: None, on_lock_freed=lambda run: None,
                             on_started=lambda *_: None)
    settler = settler_for(threads, qs)
    finish = asyncio.Event()

    async def carries_on() -> None:
        while not finish.is_set():
            with contextlib.suppress(asyncio.CancelledError):
                await finish.wait()

    run = a_run("a")
    run.task = asyncio.create_task(carries_on())
    try:
        await settler.release([run], still_going=settler.still_going([run]))
        assert settler.kept_locks() == [("acct", "a:1")]
        ended = asyncio.create_task(settler.handlers_ended())
        for _ in range(10):  # it cancels the handler once more, then waits for it
            await asyncio.sleep(0)
        assert not ended.done(), "waits for the handler still going"
        finish.set()
        await asyncio.wait_for(ended, 5)
        assert settler.kept_locks() == []
        await settler.finish()  # the unlock it then sends (it gives up: Redis away)
    finally:
        finish.set()
        threads.shutdown()
