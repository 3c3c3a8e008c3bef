"""Leases while a worker runs: heartbeats keep a long job, a lost lease discards the result, a
graceful stop releases unfinished jobs, resource locks serialise jobs, an idle worker wakes at
once, the registry entry, and the eviction-policy warning."""

from __future__ import annotations

import asyncio
import itertools
import logging
import statistics
import threading
import time

import pytest
from antre import AsyncQueue, Queue
from antre.connection import connect_async
from antre.handlers import HandlerRegistry
from antre.metrics import WorkerMetrics
from antre.protocol.claim import claim_op
from antre.protocol.release import FREE_RELEASES
from antre.protocol.scripts import load as load_script
from antre.settings import QueueSettings, WorkerSettings
from antre.worker import IDLE_WAIT_S
from invariants import as_queued_hash, assert_invariants, read_record, read_records
from redis_servers import running_redis
from reply_cutter import ReplyCutter
from worker_harness import eventually, running_worker, status_of


def lifecycle_events(caplog, event):
    return [r for r in caplog.records if r.name == "antre.lifecycle" and getattr(r, "event", None) == event]


async def test_heartbeat_keeps_a_job_longer_than_its_lease(redis_client, aredis, qs):
    registry = HandlerRegistry()
    runs = []
    outlived = asyncio.Event()

    @registry.handler("long")
    async def long(job):
        runs.append(job.attempt)
        await outlived.wait()

    def lease_pushed_past_two_leases() -> bool:
        # The deadline the heartbeat keeps moving, against the claim that set the first one.
        claimed_at = next((e.at_ms for e in queue.get(job_id).history if e.event == "claimed"), None)
        deadline = redis_client.zscore(qs.keys.processing, job_id)
        return claimed_at is not None and deadline is not None and deadline >= claimed_at + 4500

    queue = Queue(redis_client, settings=qs)
    job_id = queue.enqueue("long", resource_key="acct").job_id
    # A 1.5 s lease beaten every 0.5 s: a loaded CI machine must not stall the loop that long.
    async with running_worker(aredis, qs, registry, visibility_timeout_s=1.5, reaper_interval_s=0.1):
        # The run goes on until the heartbeat has carried it through two whole leases.
        await eventually(lease_pushed_past_two_leases, timeout_s=10, message="extensions")
        outlived.set()
        await eventually(lambda: status_of(redis_client, qs, job_id) == "done", timeout_s=10)
    info = queue.get(job_id)
    events = [e.event for e in info.history]
    assert runs == [1] and info.attempt == 1
    # One history entry per attempt; later beats stamp extended_at, which must be late in the run.
    assert "lease_expired" not in events and events.count("extended") == 1
    claimed_at = next(e.at_ms for e in info.history if e.event == "claimed")
    assert int(read_record(redis_client, qs, job_id).get("extended_at")) >= claimed_at + 3000
    assert read_record(redis_client, qs, job_id).get("lease") == "1"  # never redelivered
    assert_invariants(redis_client, qs)


@pytest.mark.parametrize("concurrency", [
    pytest.param(1, id="heartbeat-finds-it-lost"),
    pytest.param(4, id="same-worker-claims-it-again"),
])
async def test_lost_lease_discards_the_result(redis_client, aredis, qs, caplog, concurrency):
    caplog.set_level(logging.INFO, logger="antre")
    registry = HandlerRegistry()
    first_run_may_finish = threading.Event()
    calls = []

    @registry.handler("stuck")
    def stuck(job):  # a thread cannot be cancelled: its late result must be thrown away
        calls.append(job.attempt)
        if job.attempt == 1:
            first_run_may_finish.wait(10)
        return "done"

    queue = Queue(redis_client, settings=qs)
    job_id = queue.enqueue("stuck").job_id
    try:
        # With one slot and no prefetch, the worker cannot claim the job again while the
        # stuck thread holds the slot: only the heartbeat can find the lease gone.
        async with running_worker(aredis, qs, registry, visibility_timeout_s=1.0,
                                  reaper_interval_s=60, concurrency=concurrency,
                                  prefetch=0 if concurrency == 1 else None):
            await eventually(lambda: calls == [1])
            # The worker looks frozen to the rest of the world: its lease runs out and a
            # reaper pass requeues the job.
            redis_client.zadd(qs.keys.processing, {job_id: 0})
            assert queue.reap().requeued == 1
            await eventually(lambda: lifecycle_events(caplog, "lease_lost"), timeout_s=5)
            first_run_may_finish.set()
            await eventually(lambda: status_of(redis_client, qs, job_id) == "done", timeout_s=5)
    finally:
        first_run_may_finish.set()
    assert calls == [1, 2]
    info = queue.get(job_id)
    assert info.attempt == 2
    assert [e.event for e in info.history if e.event in ("lease_expired", "acked")] == [
        "lease_expired", "acked"]
    assert queue.stats().counters["done"] == 1  # the first run's result was discarded
    [lost] = lifecycle_events(caplog, "lease_lost")
    assert (lost.job_id, lost.attempt) == (job_id, 1)
    if concurrency == 1:
        assert lost.error == "heartbeat found the lease gone"
    assert_invariants(redis_client, qs)


async def test_graceful_stop_releases_unfinished_jobs_to_another_worker(redis_client, redis_url,
                                                                      aredis, qs):
    blocking = HandlerRegistry()
    started = []

    @blocking.handler("work")
    async def never_finishes(job):
        started.append(job.id)
        await asyncio.Event().wait()

    queue = Queue(redis_client, settings=qs)
    ids = [r.job_id for r in queue.enqueue_many([("work", i) for i in range(3)])]
    async with running_worker(aredis, qs, blocking, concurrency=2, grace_period_s=0.2) as first:
        await eventually(lambda: len(started) == 2)
        stop_at = time.monotonic()
    assert time.monotonic() - stop_at < 3  # grace period + release, not a visibility timeout
    released = [job_id for job_id in ids if job_id in started]
    for job_id in released:
        info = queue.get(job_id)
        assert (info.status, info.attempt) == ("queued", 0)  # no attempt spent
        assert info.history[-1].event == "released" and info.history[-1].worker == first.worker_id
    # Released jobs are at the head: claimed before the one that never started.
    assert set(redis_client.lrange(qs.keys.ready, -2, -1)) == set(released)
    assert redis_client.zcard(qs.keys.processing) == 0
    assert_invariants(redis_client, qs)

    finishing = HandlerRegistry()
    finished = []

    @finishing.handler("work")
    async def quick(job):
        finished.append((job.id, job.attempt))

    other = connect_async(redis_url)
    try:
        async with running_worker(other, qs, finishing, worker_id="w2"):
            await eventually(lambda: all(status_of(redis_client, qs, i) == "done" for i in ids))
    finally:
        await other.aclose()
    assert sorted(finished) == sorted((job_id, 1) for job_id in ids)
    assert finished[0][0] in released
    assert_invariants(redis_client, qs)


def never_finishing(redis_client, qs) -> tuple[HandlerRegistry, list[str], Queue, str, str]:
    """A registry whose ``work`` handler never finishes (noting each job it starts), and two
    jobs on their last attempt, enqueued in this order; the second was released FREE_RELEASES
    times already (by stops of earlier workers)."""
    registry = HandlerRegistry()
    started: list[str] = []

    @registry.handler("work")
    async def never_finishes(job):
        started.append(job.id)
        await asyncio.Event().wait()

    queue = Queue(redis_client, settings=qs)
    first, second = (queue.enqueue("work", max_attempts=1).job_id for _ in range(2))
    as_queued_hash(redis_client, qs, second)
    redis_client.hset(qs.keys.job(second), "releases", FREE_RELEASES)
    return registry, started, queue, first, second


async def test_a_stop_that_dead_letters_a_job_reports_it_dead_not_released(redis_client, aredis,
                                                                           qs, caplog):
    """A release past the free ones spends the attempt, and on the last attempt the job ends
    dead: the worker logged and counted that run as `released`, a job that was not given back
    to anyone."""
    caplog.set_level(logging.INFO, logger="antre.lifecycle")
    # Released FREE_RELEASES times already: this release spends the only attempt.
    registry, started, queue, requeued, dying = never_finishing(redis_client, qs)
    metrics = WorkerMetrics(qs.name)
    async with running_worker(aredis, qs, registry, grace_period_s=0.1, metrics=metrics):
        await eventually(lambda: sorted(started) == sorted([dying, requeued]))
    assert (queue.get(dying).status, queue.get(requeued).status) == ("dead", "queued")
    assert [r.job_id for r in lifecycle_events(caplog, "released")] == [requeued]
    assert [r.job_id for r in lifecycle_events(caplog, "dead")] == [dying]
    assert metrics.jobs.labels(qs.name, "work", "released")._value.get() == 1
    assert metrics.jobs.labels(qs.name, "work", "dead")._value.get() == 1
    assert queue.stats().counters.get("released") == 1
    assert_invariants(redis_client, qs)


async def test_a_stop_refunds_a_prefetched_job_however_often_it_was_released(
        redis_client, aredis, qs, monkeypatch):
    """A prefetched job never started: a stop gives its attempt back even past the free
    releases (they bound jobs that never finish within a grace period, and this one never
    began). Before, a job on its last attempt, prefetched by a fourth stopping worker in a
    rolling restart, ended dead without ever running."""
    registry, started, queue, running, prefetched = never_finishing(redis_client, qs)
    async with running_worker(aredis, qs, registry, concurrency=1, grace_period_s=0.1) as worker:
        monkeypatch.setattr(worker.prefetch, "size", lambda now: 1)  # before its first claim
        await eventually(lambda: started == [running] and list(worker._waiting) and status_of(
            redis_client, qs, prefetched) == "processing",
            message="one job running, the other prefetched behind it")
    assert started == [running], "the prefetched job never started"
    info = queue.get(prefetched)
    assert (info.status, info.attempt) == ("queued", 0)
    assert [e.event for e in info.history if e.event != "extended"] == [
        "enqueued", "claimed", "released"]
    assert read_record(redis_client, qs, prefetched)["releases"] == str(FREE_RELEASES)
    # The run that began is counted: a job that never finishes within a grace period still
    # ends dead after the free releases.
    assert read_record(redis_client, qs, running)["releases"] == "1"
    assert_invariants(redis_client, qs)


def recorded_runs(registry: HandlerRegistry, job_type: str, seconds: float) -> list[tuple]:
    """Registers a handler for ``job_type`` that sleeps ``seconds``; returns the list it fills
    with (start, end, payload) per run."""
    spans: list[tuple] = []

    @registry.handler(job_type)
    async def run(job):
        start = time.monotonic()
        await asyncio.sleep(seconds)
        spans.append((start, time.monotonic(), job.payload))

    return spans


async def test_jobs_on_one_resource_never_overlap(redis_client, aredis, qs):
    registry = HandlerRegistry()
    spans = recorded_runs(registry, "touch", 0.05)
    queue = Queue(redis_client, settings=qs)
    jobs = [{"type": "touch", "payload": i, "resource_key": "acct-1"} for i in range(5)]
    jobs.append({"type": "touch", "payload": "other", "resource_key": "acct-2"})
    queue.enqueue_many(jobs)
    async with running_worker(aredis, qs, registry, concurrency=6):
        await eventually(lambda: len(spans) == 6, timeout_s=10)
    same = sorted(span for span in spans if span[2] != "other")
    for (_, end, _), (start, _, _) in itertools.pairwise(same):
        assert start >= end, f"overlap on acct-1: {same}"
    assert queue.stats().counters.get("lock_deferred", 0) >= 1
    job_ids = [key[len(qs.keys.job_prefix):]
               for key in redis_client.scan_iter(match=qs.keys.scan_pattern()[:-1] + "job:*")]
    for record in read_records(redis_client, qs, job_ids):
        assert record["attempt"] == "1"  # waiting spent no attempt
    assert_invariants(redis_client, qs)


async def test_a_line_of_jobs_on_one_resource_runs_back_to_back(redis_client, aredis, qs):
    """Each job waiting for the resource used to wait out its re-check (lock_defer_s, 1 s here)
    even when the run ahead of it took 20 ms: ten such jobs took about ten seconds. The ack
    that frees the lock wakes the next one, so they run back to back, in their order."""
    registry = HandlerRegistry()
    spans = recorded_runs(registry, "sync", 0.02)
    queue = Queue(redis_client, settings=qs)
    async with running_worker(aredis, qs, registry, concurrency=10, lock_defer_s=1.0):
        queue.enqueue_many([{"type": "sync", "payload": i, "resource_key": "acct-1"}
                            for i in range(10)])
        await eventually(lambda: len(spans) == 10, timeout_s=15)
    gaps = [start - end for (_, end, _), (start, _, _) in itertools.pairwise(spans)]
    assert min(gaps) >= 0, f"overlap on acct-1: {spans}"
    assert max(gaps) < 0.5, f"a job waited for its re-check: gaps {gaps}"
    assert queue.stats().counters.get("lock_deferred", 0) >= 9
    assert [payload for _, _, payload in spans] == list(range(10))
    assert_invariants(redis_client, qs)


async def test_idle_worker_starts_a_new_job_within_10_ms(redis_client, redis_url, aredis, qs):
    registry = HandlerRegistry()
    started: dict[int, float] = {}

    @registry.handler("ping")
    async def ping(job):
        started[job.payload] = time.perf_counter()

    producer = AsyncQueue(connect_async(redis_url), settings=qs)
    latencies = []
    try:
        async with running_worker(aredis, qs, registry):
            await producer.stats()  # connect before measuring
            for i in range(20):
                # Idle: the last job acked, and the worker in its blocking wait.
                await eventually(lambda: redis_client.zcard(qs.keys.processing) == 0
                                 and redis_client.info("clients")["blocked_clients"] >= 1,
                                 interval_s=0.001, message="the worker idle in its blocking wait")
                sent = time.perf_counter()
                await producer.enqueue("ping", i)
                await eventually(lambda i=i: i in started, timeout_s=2, interval_s=0.001)
                latencies.append(started[i] - sent)
    finally:
        await producer.close()
    median_ms = statistics.median(latencies) * 1000
    assert median_ms < 10, f"median {median_ms:.2f} ms; all: {[round(x * 1000, 2) for x in latencies]}"


async def test_a_job_that_ends_a_long_idle_wait_keeps_its_lease(redis_client, aredis, qs):
    """The claim queued behind the idle wait leases its jobs when the wait ends; the worker
    counted the leases from the wait's send, so with a 1 s lease, a job enqueued 0.95 s into
    the wait was "claimed after its leases' deadline" and given back unstarted."""
    registry = HandlerRegistry()

    @registry.handler("t")
    async def noop(job):
        pass

    waits = int(redis_client.info("commandstats").get("cmdstat_blmove", {}).get("calls", 0))
    async with running_worker(aredis, qs, registry, visibility_timeout_s=1.0):
        await eventually(lambda: int(redis_client.info("commandstats").get(
            "cmdstat_blmove", {}).get("calls", 0)) > waits, message="the worker's idle wait")
        # The job arrives late in the wait (IDLE_WAIT_S, as long as the lease): 95% into it.
        await asyncio.sleep(0.95 * IDLE_WAIT_S)
        job_id = Queue(redis_client, settings=qs).enqueue("t").job_id
        await eventually(lambda: status_of(redis_client, qs, job_id) == "done")
    # Claimed once and run, not given back unstarted ("released"); a heartbeat may land
    # before the ack on a loaded machine (an "extended" entry), which is beside the point.
    events = [e.event for e in Queue(redis_client, settings=qs).get(job_id).history
              if e.event != "extended"]
    assert events == ["enqueued", "claimed", "acked"]


async def test_a_worker_silent_past_its_lease_beats_before_it_is_leased_again(
        redis_client, aredis, qs, caplog):
    """A claim that finds this worker's last beat older than a lease leases nothing (claim.lua):
    the worker beats at once instead of at its interval (5 s here), then claims."""
    caplog.set_level(logging.WARNING, logger="antre.worker")
    registry = HandlerRegistry()

    @registry.handler("t")
    async def noop(job):
        pass

    queue = Queue(redis_client, settings=qs)
    async with running_worker(aredis, qs, registry, worker_id="w-silent", visibility_timeout_s=60):
        await eventually(lambda: redis_client.zscore(qs.keys.workers, "w-silent"),
                         message="the first beat")
        seconds, micros = redis_client.time()
        # As Redis would see a worker frozen for two minutes since its last beat.
        redis_client.zadd(qs.keys.workers, {"w-silent": seconds * 1000 + micros // 1000 - 120_000})
        job_id = queue.enqueue("t").job_id
        await eventually(lambda: status_of(redis_client, qs, job_id) == "done")
    history = queue.get(job_id).history
    assert [e.event for e in history] == ["enqueued", "claimed", "acked"]
    assert history[1].at_ms - history[0].at_ms < 2500, "claimed only at the next regular beat"
    assert any(r.getMessage().startswith("no heartbeat reached Redis for a whole lease")
               for r in caplog.records)
    assert_invariants(redis_client, qs)


async def test_registry_entry_names_the_pod(redis_client, aredis, qs, monkeypatch):
    monkeypatch.setenv("POD_NAME", "antre-worker-7f9c")
    registry = HandlerRegistry()
    registry.register("noop", lambda job: None)
    queue = Queue(redis_client, settings=qs)
    async with running_worker(aredis, qs, registry, concurrency=3, worker_id="w-reg"):
        [entry] = await eventually(queue.workers)
        assert (entry.worker_id, entry.pod, entry.concurrency, entry.in_flight) == (
            "w-reg", "antre-worker-7f9c", 3, 0)
        assert entry.beat_age_s < 5
    assert queue.workers() == []  # a stopped worker unregisters at once


async def test_eviction_policy_warning_is_logged(caplog):
    caplog.set_level(logging.WARNING, logger="antre")
    registry = HandlerRegistry()
    registry.register("noop", lambda job: None)
    qs = QueueSettings(name="evict")
    with running_redis("--maxmemory-policy", "allkeys-lru") as server:
        client = connect_async(server.url)
        try:
            async with running_worker(client, qs, registry):
                await eventually(lambda: any("maxmemory-policy" in r.getMessage() for r in caplog.records))
        finally:
            await client.aclose()
    [warning] = [r for r in caplog.records if "maxmemory-policy" in r.getMessage()]
    assert warning.levelno == logging.WARNING
    assert "'allkeys-lru'" in warning.getMessage() and "noeviction" in warning.getMessage()


async def test_no_warning_with_noeviction(redis_client, aredis, qs, caplog):
    caplog.set_level(logging.WARNING, logger="antre")
    registry = HandlerRegistry()
    registry.register("noop", lambda job: None)
    async with running_worker(aredis, qs, registry) as worker:
        await eventually(lambda: worker.in_flight == 0 and redis_client.exists(qs.keys.worker("w1")))
    assert not [r for r in caplog.records if "maxmemory-policy" in r.getMessage()]


async def test_an_ack_lost_with_its_idle_wait_is_sent_again(redis_client, redis_url, qs, caplog):
    """The ack of a job that ran while the worker was idle goes in the write of the next idle
    wait; the connection drops after Redis ran the ack and before its reply arrived. The ack
    goes back to the ack batcher, which sends it again on its own connection: Redis answers
    that lease acked, so the run counts as succeeded, and the job ran once."""
    caplog.set_level(logging.INFO, logger="antre.worker")
    registry = HandlerRegistry()
    ran: list[str] = []

    @registry.handler("t")
    async def record(job):
        ran.append(job.id)

    queue = Queue(redis_client, settings=qs)
    redis_port = int(redis_url.rsplit(":", 1)[1].split("/")[0])
    async with ReplyCutter(redis_port) as cutter:
        client = connect_async(cutter.url)
        try:
            async with running_worker(client, qs, registry) as worker:
                await eventually(lambda: any(c["cmd"] == "blmove" and "b" in c["flags"]
                                             for c in redis_client.client_list()),
                                 message="the worker waiting on an empty queue")
                ack = load_script("ack")
                redis_client.script_load(ack.text)  # not the first ack: no NOSCRIPT reply
                cutter.hold_replies_after(ack.sha.encode())
                job_id = queue.enqueue("t").job_id
                await asyncio.wait_for(cutter.holding.wait(), 5)
                await eventually(lambda: status_of(redis_client, qs, job_id) == "done",
                                 message="the ack ran in Redis")
                cutter.cut()
                await eventually(lambda: worker.succeeded == 1, timeout_s=10,
                                 message="the ack answered")
                assert worker.in_flight == 0
        finally:
            await client.aclose()
    assert ran == [job_id]
    events = [e.event for e in queue.get(job_id).history if e.event != "extended"]
    assert events == ["enqueued", "claimed", "acked"]
    # The connection cut was the idle wait's (the claim loop's), not the ack batcher's.
    failed = [r for r in caplog.records if r.getMessage() == "redis call failed; retrying with backoff"]
    assert [r.operation for r in failed] == ["claim"]
    assert not lifecycle_events(caplog, "lease_lost")
    assert_invariants(redis_client, qs)


@pytest.mark.parametrize("claim_path", ["idle wait", "direct"])
async def test_a_claim_whose_reply_is_lost_is_answered_again(redis_client, redis_url, qs, caplog,
                                                              claim_path):
    """The connection drops after Redis ran a claim and before its reply arrived (a reset at the
    worst moment). Before, the job stayed leased to this worker, which knew nothing of it,
    until the lease expired (a minute here): the attempt was spent, and on a job's last attempt
    it went to the dead letters without ever running. The worker now sends the claim again with
    its id, and Redis answers the leases the first sending made."""
    caplog.set_level(logging.INFO, logger="antre.worker")
    registry = HandlerRegistry()
    ran: list[tuple[str, int]] = []

    @registry.handler("t")
    async def record(job):
        ran.append((job.id, job.attempt))

    queue = Queue(redis_client, settings=qs)
    redis_port = int(redis_url.rsplit(":", 1)[1].split("/")[0])
    claim_sha = claim_op(qs, WorkerSettings(), worker_id="w1", max_jobs=1).script.sha.encode()
    async with ReplyCutter(redis_port) as cutter:
        client = connect_async(cutter.url)
        try:
            async with running_worker(client, qs, registry, visibility_timeout_s=60,
                                      concurrency=1):
                await eventually(lambda: redis_client.zscore(qs.keys.workers, "w1"),
                                 message="the first beat")
                if claim_path == "direct":
                    # The worker is busy: its next claim is sent straight away once the slot
                    # frees, with the job already queued.
                    blocker = asyncio.Event()

                    @registry.handler("block")
                    async def block(job):
                        await blocker.wait()

                    queue.enqueue("block")
                    await eventually(lambda: redis_client.zcard(qs.keys.processing) == 1,
                                     message="the blocking job running")
                    job_id = queue.enqueue("t").job_id
                    cutter.hold_replies_after(claim_sha)
                    blocker.set()
                else:
                    waits = int(redis_client.info("commandstats").get(
                        "cmdstat_blmove", {}).get("calls", 0))
                    await eventually(lambda: int(redis_client.info("commandstats").get(
                        "cmdstat_blmove", {}).get("calls", 0)) > waits, message="an idle wait")
                    cutter.hold_replies_after(claim_sha)
                    await asyncio.wait_for(cutter.holding.wait(), 5)  # the next idle wait
                    job_id = queue.enqueue("t").job_id
                await asyncio.wait_for(cutter.holding.wait(), 5)
                await eventually(lambda: status_of(redis_client, qs, job_id) == "processing",
                                 message="the claim ran in Redis")
                cutter.cut()
                await eventually(lambda: status_of(redis_client, qs, job_id) == "done",
                                 timeout_s=10, message="the job run within seconds, not a lease")
        finally:
            await client.aclose()
    assert (job_id, 1) in ran
    events = [e.event for e in queue.get(job_id).history if e.event != "extended"]
    assert events == ["enqueued", "claimed", "acked"]
    assert any(r.getMessage() == "a claim's reply was lost; Redis answered its leases again"
               for r in caplog.records)
    assert_invariants(redis_client, qs)
