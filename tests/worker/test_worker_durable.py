"""A worker with durable writes (``QueueSettings.durable_replicas``), on a primary with a
replica that the tests stop (SIGSTOP) to hold its confirmations back.

Covers: a claim the replicas do not confirm is given back unstarted (the handler never runs,
the attempt is refunded); a lease renewal they do not confirm does not move the run's own
deadline, so the run is abandoned at the deadline of its last confirmed renewal, as after an
outage; an ack they do not confirm is sent again until they do, and the run ends succeeded.
"""

from __future__ import annotations

import asyncio
import signal
from collections.abc import AsyncIterator, Iterator
from typing import Any

import pytest
import redis
from antre import Queue, QueueSettings
from antre.connection import connect_async
from antre.errors import NotReplicated
from antre.handlers import HandlerRegistry
from antre.protocol import scripts
from antre.protocol.claim import claim_op
from antre.settings import WorkerSettings
from invariants import assert_invariants
from redis_servers import RedisServer, replicated_redis, wait_until
from worker_harness import eventually, running_worker, status_of

#: The tests' producer writes without waiting for the replica (the worker is under test).
PRODUCER = QueueSettings(name="dw")


@pytest.fixture
def replicated() -> Iterator[tuple[RedisServer, RedisServer]]:
    with replicated_redis(1) as (primary, [replica]):
        yield primary, replica


@pytest.fixture
def primary(replicated: tuple[RedisServer, RedisServer]) -> Iterator[redis.Redis]:
    with redis.Redis(port=replicated[0].port, decode_responses=True) as client:
        yield client


@pytest.fixture
async def aprimary(replicated: tuple[RedisServer, RedisServer]) -> AsyncIterator[Any]:
    client = connect_async(replicated[0].url)
    yield client
    await client.aclose()


def stop(server: RedisServer) -> None:
    assert server.process is not None
    server.process.send_signal(signal.SIGSTOP)


def resume(server: RedisServer) -> None:
    assert server.process is not None
    server.process.send_signal(signal.SIGCONT)


async def test_an_unconfirmed_claim_is_given_back_unstarted(
        primary: redis.Redis, aprimary: Any, caplog: pytest.LogCaptureFixture) -> None:
    # Two replicas wanted, one there: no claim is ever confirmed.
    qs = QueueSettings(name="dw", durable_replicas=2, durable_timeout_s=0.1)
    registry = HandlerRegistry()
    started: list[str] = []

    @registry.handler("t")
    async def handle(job: Any) -> None:
        started.append(job.id)

    def given_back() -> int:
        return sum(r.getMessage() == "claimed jobs given back unstarted" for r in caplog.records)

    job_id = Queue(primary, settings=PRODUCER).enqueue("t").job_id
    async with running_worker(aprimary, qs, registry):
        # Given back, claimed again and given back again: never started in between.
        await eventually(lambda: given_back() >= 2, message="two claims of the job given back")
    assert started == []
    info = Queue(primary, settings=qs).get(job_id)
    assert info.status == "queued" and info.attempt == 0  # released, the attempt refunded
    assert_invariants(primary, qs)


async def test_an_unconfirmed_renewal_leaves_the_run_its_old_deadline(
        replicated: tuple[RedisServer, RedisServer], primary: redis.Redis,
        aprimary: Any) -> None:
    qs = QueueSettings(name="dw", durable_replicas=1, durable_timeout_s=0.2)
    registry = HandlerRegistry()
    running, cancelled = asyncio.Event(), asyncio.Event()

    @registry.handler("long")
    async def long(job: Any) -> None:
        running.set()
        try:
            await asyncio.sleep(30)
        except asyncio.CancelledError:
            cancelled.set()
            raise

    job_id = Queue(primary, settings=PRODUCER).enqueue("long").job_id
    async with running_worker(aprimary, qs, registry, visibility_timeout_s=1.5) as worker:
        await asyncio.wait_for(running.wait(), 10)
        stop(replicated[1])
        try:
            # Renewals still land on the primary, but unconfirmed they are not trusted: the run
            # is abandoned at most one lease after its last confirmed renewal.
            await asyncio.wait_for(cancelled.wait(), 5)
            assert worker.in_flight == 0
        finally:
            resume(replicated[1])
    assert status_of(primary, qs, job_id) in ("processing", "queued")


async def test_an_unconfirmed_ack_is_sent_again_until_confirmed(
        replicated: tuple[RedisServer, RedisServer], primary: redis.Redis,
        aprimary: Any) -> None:
    qs = QueueSettings(name="dw", durable_replicas=1, durable_timeout_s=0.2)
    registry = HandlerRegistry()
    finishing = asyncio.Event()

    @registry.handler("t")
    async def handle(job: Any) -> None:
        await finishing.wait()

    job_id = Queue(primary, settings=PRODUCER).enqueue("t").job_id
    async with running_worker(aprimary, qs, registry, visibility_timeout_s=5.0) as worker:
        await eventually(lambda: worker.in_flight == 1, message="the job running")
        stop(replicated[1])
        try:
            finishing.set()
            # The ack is done on the primary but not confirmed: the run is still held.
            await eventually(lambda: status_of(primary, qs, job_id) == "done",
                             message="the ack on the primary")
            # Sent again for three of the replica's confirmation timeouts, never confirmed.
            await asyncio.sleep(3 * qs.durable_timeout_s)
            assert worker.in_flight == 1 and worker.succeeded == 0
        finally:
            resume(replicated[1])
        await eventually(lambda: worker.succeeded == 1, message="the ack confirmed")
    assert worker.in_flight == 0
    assert_invariants(primary, qs)


def test_a_claim_sent_again_is_confirmed_only_once_its_first_sending_is(
        replicated: tuple[RedisServer, RedisServer], primary: redis.Redis) -> None:
    """A claim whose reply was lost is sent again on another connection: its answer must not
    be trusted before the replica has the leases it answers (a failover could lease the job to
    another worker while this one runs it). WAIT guarantees only the connection's own earlier
    writes, so the replay writes its record's expiry again; the Redis 7.0 of this suite counts
    from the server's offset and would hold it back even without that write."""
    qs = QueueSettings(name="dw", durable_replicas=1, durable_timeout_s=0.2)
    job_id = Queue(primary, settings=PRODUCER).enqueue("t").job_id
    claim = claim_op(qs, WorkerSettings(), worker_id="w1", max_jobs=1, claim_id="k1")
    stop(replicated[1])
    try:
        with pytest.raises(NotReplicated):
            scripts.run(primary, claim)
        with (redis.Redis(port=replicated[0].port, decode_responses=True) as other,
              pytest.raises(NotReplicated) as info):
            scripts.run(other, claim)
        assert info.value.result.replayed_claimed_at_ms is not None
        assert [job.id for job in info.value.result.jobs] == [job_id]
    finally:
        resume(replicated[1])

    def confirmed() -> Any:  # the replica catches up once it runs again
        with redis.Redis(port=replicated[0].port, decode_responses=True) as other:
            try:
                return scripts.run(other, claim)
            except NotReplicated:
                return None

    again = wait_until(confirmed, timeout_s=10, message="the replay confirmed by the replica")
    assert [job.id for job in again.jobs] == [job_id] and again.replayed_claimed_at_ms
