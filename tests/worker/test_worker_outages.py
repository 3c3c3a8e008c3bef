"""A worker cut off from Redis for longer than its lease (issue 10.8 and its "also decide" list).

Aspects: a run whose lease cannot be renewed stops being treated as held at its own deadline
(its async handler is cancelled, its result never acknowledged, ``lease_lost`` logged) so two
runs on one resource never overlap after the outage; a run that finished before its deadline
is acknowledged when Redis is back, and on its last attempt that makes the job done instead of
dead. Each test has a redis-server of its own, frozen with SIGSTOP or stopped and restarted.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import signal
import time

import redis
from antre import HandlerRegistry, Job, Queue, QueueSettings
from antre.connection import connect_async
from invariants import assert_invariants
from redis_servers import running_redis
from worker_harness import eventually, running_worker, status_of

LEASE_S = 1.5


async def test_a_run_whose_lease_cannot_be_renewed_is_abandoned_at_its_deadline(caplog):
    """Seen before: with Redis away longer than the lease, the first run went on, a second job
    took the resource when Redis returned, and the first run's late ack was accepted: two runs
    on one resource at once, both done. Now the first run is cancelled at its own deadline."""
    caplog.set_level(logging.INFO, logger="antre")
    qs = QueueSettings(name="outage")
    registry = HandlerRegistry()
    spans: list[tuple[str, int, float, float, str]] = []
    frozen_at: list[float] = []

    @registry.handler("print")
    async def print_document(job: Job) -> None:
        began = time.monotonic()
        try:
            await asyncio.sleep(6.0 if job.attempt == 1 and job.payload == "first" else 0.2)
        except asyncio.CancelledError:
            spans.append((job.payload, job.attempt, began, time.monotonic(), "cancelled"))
            raise
        spans.append((job.payload, job.attempt, began, time.monotonic(), "finished"))

    with running_redis("--maxmemory-policy", "noeviction") as server:
        sync = redis.Redis.from_url(server.url, decode_responses=True)
        queue = Queue(sync, settings=qs)
        first = queue.enqueue("print", "first", resource_key="printer").job_id
        client = connect_async(server.url)
        try:
            async with running_worker(client, qs, registry, concurrency=2,
                                      visibility_timeout_s=LEASE_S, reaper_interval_s=0.2) as worker:
                await eventually(lambda: worker.in_flight == 1 and queue.get(first).attempt == 1)
                second = queue.enqueue("print", "second", resource_key="printer").job_id
                assert server.process is not None
                server.process.send_signal(signal.SIGSTOP)  # Redis answers nothing from now on
                frozen_at.append(time.monotonic())
                try:
                    await eventually(lambda: spans, timeout_s=LEASE_S + 2, message="run 1 abandoned")
                finally:
                    # Frozen 0.5 s past the run's deadline, just reached: Redis's copy of the
                    # lease (set a round trip later) has run out too. The test is about that.
                    await asyncio.sleep(0.5)
                    server.process.send_signal(signal.SIGCONT)
                await eventually(lambda: status_of(sync, qs, first) == status_of(sync, qs, second)
                                 == "done", timeout_s=15)
        finally:
            await client.aclose()
        [abandoned] = [span for span in spans if span[4] == "cancelled"]
        assert abandoned[:2] == ("first", 1)
        assert abandoned[3] - frozen_at[0] <= LEASE_S + 0.3, "cancelled after its deadline"
        info = queue.get(first)
        assert info.attempt == 2 and "lease_expired" in [e.event for e in info.history]
        ordered = sorted(spans, key=lambda span: span[2])
        for before, after in itertools.pairwise(ordered):
            assert after[2] >= before[3], f"two runs on the printer at once: {ordered}"
        lost = [r for r in caplog.records if getattr(r, "event", None) == "lease_lost"]
        assert [(r.job_id, r.attempt) for r in lost] == [(first, 1)]
        assert "not renewed before its deadline" in lost[0].error
        assert_invariants(sync, qs)
        sync.close()


async def test_a_last_attempt_whose_ack_comes_back_late_ends_done_not_dead():
    """Also decide: a job whose batched ack was lost on its last attempt ended dead although it
    succeeded (the ack gave up after a lease; the reaper then dead-lettered the job). The ack is
    retried until Redis is back, and a late ack of a last attempt records the job done."""
    qs = QueueSettings(name="late")
    registry = HandlerRegistry()

    with running_redis("--maxmemory-policy", "noeviction", appendonly=True,
                       appendfsync="always") as server:

        @registry.handler("charge")
        async def charge(job: Job) -> None:
            server.shutdown()  # Redis goes away between the run and its ack

        sync = redis.Redis.from_url(server.url, decode_responses=True)
        job_id = Queue(sync, settings=qs).enqueue("charge", max_attempts=1).job_id
        client = connect_async(server.url)
        try:
            async with running_worker(client, qs, registry, visibility_timeout_s=LEASE_S,
                                      reaper_interval_s=0.2):
                await eventually(lambda: server.process is None, message="Redis stopped")
                await asyncio.sleep(LEASE_S + 1.5)  # the outage: longer than the lease
                server.start()
                await eventually(lambda: status_of(sync, qs, job_id) in ("done", "dead"),
                                 timeout_s=15)
        finally:
            await client.aclose()
        info = Queue(sync, settings=qs).get(job_id)
        assert (info.status, info.outcome, info.attempt) == ("done", "succeeded", 1)
        assert sync.zcard(qs.keys.dead) == 0
        assert "after its lease expired" in info.history[-1].error
        assert_invariants(sync, qs)
        sync.close()
