"""An idle worker starts a new job one network trip after it is enqueued, not two.

The worker reaches Redis through a TCP proxy that delays every byte by ``ONE_WAY_S`` in each
direction (a round trip of ``2 * ONE_WAY_S``, as to a Redis in another zone). A worker that
is woken by its blocking wait and then sends its claim needs the wake-up reply plus a whole
claim round trip (3 one-way delays); with the claim queued behind the wait on the same
connection, Redis runs it the moment the job arrives and the worker starts the job as soon as
the one reply reaches it (1 one-way delay). Also covered: a stop ends the blocking wait at
once, through the proxy's delays, with nothing claimed left behind; and a worker that keeps up
with its producer sends one claim per job, each behind the blocking wait, never a claim that
finds the queue empty.
"""

from __future__ import annotations

import asyncio
import contextlib
import statistics
import threading
import time
from collections.abc import AsyncIterator, Callable, Iterator
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import pytest
from antre import AsyncQueue
from antre import worker as worker_module
from antre.connection import connect_async
from antre.handlers import HandlerRegistry
from antre.protocol.scripts import load as load_script
from antre.settings import QueueSettings
from invariants import assert_invariants
from redis_servers import major_version
from worker_harness import eventually, running_worker

ONE_WAY_S = 0.05


async def _pump(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    """Copies ``reader`` to ``writer``, each chunk ``ONE_WAY_S`` after it arrived, in order."""
    loop = asyncio.get_running_loop()
    chunks: asyncio.Queue[tuple[float, bytes]] = asyncio.Queue()

    async def deliver() -> None:
        while True:
            due, data = await chunks.get()
            if not data:
                break
            await asyncio.sleep(max(due - loop.time(), 0))
            writer.write(data)
            await writer.drain()

    delivering = asyncio.create_task(deliver())
    try:
        while data := await reader.read(65536):
            chunks.put_nowait((loop.time() + ONE_WAY_S, data))
        chunks.put_nowait((loop.time(), b""))
        await delivering
    finally:
        delivering.cancel()
        writer.close()


@contextlib.asynccontextmanager
async def delaying_proxy(redis_url: str) -> AsyncIterator[str]:
    """A URL reaching ``redis_url``'s server through the delaying proxy."""
    target = urlsplit(redis_url)

    async def serve(client_reader: asyncio.StreamReader, client_writer: asyncio.StreamWriter) -> None:
        server_reader, server_writer = await asyncio.open_connection(target.hostname, target.port)
        await asyncio.gather(_pump(client_reader, server_writer),
                             _pump(server_reader, client_writer), return_exceptions=True)

    server = await asyncio.start_server(serve, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    try:
        yield urlunsplit(target._replace(netloc=f"127.0.0.1:{port}"))
    finally:
        server.close()


def _blocked_on_the_ready_list(redis_client: Any) -> bool:
    return any(client["cmd"] == "blmove" and "b" in client["flags"]
               for client in redis_client.client_list())


def start_times(job_type: str) -> tuple[HandlerRegistry, dict[Any, float]]:
    """A registry whose ``job_type`` handler records when each job started, by its payload."""
    registry = HandlerRegistry()
    started: dict[Any, float] = {}

    @registry.handler(job_type)
    async def stamp(job: Any) -> None:
        started[job.payload] = time.perf_counter()

    return registry, started


def claim_round_trips(worker: Any, monkeypatch: pytest.MonkeyPatch) -> list[float]:
    """The claim round trips ``worker`` gives its prefetch sizer from now on, as they come."""
    round_trips: list[float] = []
    measure = worker.prefetch.claimed
    monkeypatch.setattr(worker.prefetch, "claimed",
                        lambda rtt_s: (round_trips.append(rtt_s), measure(rtt_s)))
    return round_trips


@contextlib.asynccontextmanager
async def idle_worker(redis_client: Any, redis_url: str, qs: QueueSettings,
                      registry: HandlerRegistry, **settings: Any,
                      ) -> AsyncIterator[tuple[Any, AsyncQueue]]:
    """A worker blocked on ``qs``'s empty ready list, and a producer for that queue."""
    producer = AsyncQueue(connect_async(redis_url), settings=qs)
    worker_redis = connect_async(redis_url)
    try:
        async with running_worker(worker_redis, qs, registry, **settings) as worker:
            await eventually(lambda: _blocked_on_the_ready_list(redis_client),
                             message="the worker blocked on the ready list")
            yield worker, producer
    finally:
        await worker_redis.aclose()
        await producer.close()


@pytest.fixture
def slow_qs() -> QueueSettings:
    return QueueSettings(name="wake", max_attempts=3)


async def test_idle_worker_starts_a_job_one_trip_after_it_is_enqueued(
        redis_client: Any, redis_url: str, slow_qs: QueueSettings) -> None:
    registry, started = start_times("ping")
    producer = AsyncQueue(connect_async(redis_url), settings=slow_qs)
    latencies = []
    async with delaying_proxy(redis_url) as far_url:
        far = connect_async(far_url)
        try:
            async with running_worker(far, slow_qs, registry):
                await producer.stats()  # connected before measuring
                for i in range(5):
                    await eventually(lambda: _blocked_on_the_ready_list(redis_client),
                                     message="the worker blocked on the ready list")
                    sent = time.perf_counter()
                    await producer.enqueue("ping", i)
                    await eventually(lambda i=i: i in started, timeout_s=5)
                    latencies.append(started[i] - sent)
                    await eventually(lambda: redis_client.zcard(slow_qs.keys.processing) == 0)
        finally:
            await far.aclose()
            await producer.close()
    median_s = statistics.median(latencies)
    # One trip is ONE_WAY_S; two round trips' worth (wake-up, then claim) would be 3x that.
    assert ONE_WAY_S <= median_s < 2 * ONE_WAY_S, [round(x * 1000) for x in latencies]
    assert_invariants(redis_client, slow_qs)


async def test_stop_ends_the_blocking_wait_at_once(redis_client: Any, redis_url: str,
                                                  slow_qs: QueueSettings,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    # A wait far longer than the stop may take, so only an interrupted wait passes.
    monkeypatch.setattr(worker_module, "IDLE_WAIT_S", 30.0)
    registry = HandlerRegistry()
    registry.register("noop", lambda job: None)
    async with delaying_proxy(redis_url) as far_url:
        far = connect_async(far_url)
        try:
            async with running_worker(far, slow_qs, registry) as worker:
                await eventually(lambda: _blocked_on_the_ready_list(redis_client),
                                 message="the worker blocked on the ready list")
                stopping_at = time.perf_counter()
                worker.stop()
            stopped_s = time.perf_counter() - stopping_at
        finally:
            await far.aclose()
    # The unblock, the wait's replies and the shutdown's calls take a few one-way delays.
    assert stopped_s < 10, f"stop took {stopped_s:.2f} s"
    assert redis_client.zcard(slow_qs.keys.processing) == 0
    assert redis_client.llen(slow_qs.keys.ready) == 0


@contextlib.contextmanager
def monitoring(redis_client: Any, seen: Callable[[str, str, list[str]], None]) -> Iterator[None]:
    """Calls ``seen(connection, NAME, words)`` for each command a client sends meanwhile, in
    the order Redis ran them (``MONITOR``; the commands scripts run are left out)."""
    stop_token = "monitoring-stop"
    monitor = redis_client.monitor()
    monitor.connection.send_command("MONITOR")  # subscribed before the block runs
    assert monitor.connection.read_response() in ("OK", b"OK")

    def listen() -> None:
        while True:
            command = monitor.next_command()
            words = str(command["command"]).split()
            if stop_token in words:
                return
            if words and command.get("client_type") != "lua":
                seen(f"{command['client_address']}:{command['client_port']}", words[0].upper(),
                     words)

    listener = threading.Thread(target=listen, daemon=True)
    listener.start()
    try:
        yield
    finally:
        redis_client.echo(stop_token)
        listener.join(timeout=10)
        monitor.connection.disconnect()


@contextlib.contextmanager
def claims_seen(redis_client: Any) -> Iterator[list[int]]:
    """Counts the claim script's calls Redis runs meanwhile: yields the number of plain claims
    and of claims sent behind a BLMOVE, final once the block ends."""
    claim_sha = load_script("claim").sha
    counts = [0, 0]
    previous: dict[str, str] = {}  # per connection: the command it ran last

    def seen(connection: str, name: str, words: list[str]) -> None:
        if name == "EVALSHA" and len(words) > 1 and words[1] == claim_sha:
            counts[1 if previous.get(connection) == "BLMOVE" else 0] += 1
        previous[connection] = name

    with monitoring(redis_client, seen):
        yield counts


@contextlib.contextmanager
def acks_seen(redis_client: Any) -> Iterator[list[int]]:
    """Counts the ack script's calls Redis runs meanwhile: yields the number of acks sent on
    their own and of acks written in front of an idle wait (the next command on their
    connection the wait's first that MONITOR shows), final once the block ends."""
    ack_sha = load_script("ack").sha
    counts = [0, 0]
    acked: set[str] = set()  # connections whose last command was an ack
    # The wait sends CLIENT ID, TIME, then BLMOVE. Redis 6.2 never shows CLIENT to MONITOR (an
    # administrative command there; 7.0 shows CLIENT ID), so there the wait starts at TIME.
    wait_starts = "CLIENT" if major_version(redis_client) >= 7 else "TIME"

    def seen(connection: str, name: str, words: list[str]) -> None:
        if connection in acked:
            acked.discard(connection)
            counts[1 if name == wait_starts else 0] += 1
        if name == "EVALSHA" and len(words) > 1 and words[1] == ack_sha:
            acked.add(connection)

    with monitoring(redis_client, seen):
        yield counts


async def test_a_worker_keeping_up_with_its_producer_claims_once_per_job(
        redis_client: Any, redis_url: str, slow_qs: QueueSettings,
        monkeypatch: pytest.MonkeyPatch) -> None:
    # Each job arrives after the one before it finished: every claim that leased it got fewer
    # jobs than it asked for, so the next one waits behind the blocking pop. A plain claim sent
    # straight after it would find the queue empty, a wasted round trip per job.
    registry, started = start_times("ping")
    jobs = 30
    async with idle_worker(redis_client, redis_url, slow_qs, registry) as (worker, producer):
        # The prefetch buffer is sized from the claims' round trips: those sent behind the
        # wait count too (the wait taken out), or it would keep the first claim's forever.
        round_trips = claim_round_trips(worker, monkeypatch)
        with claims_seen(redis_client) as counts:
            for i in range(jobs):
                await producer.enqueue("ping", i)
                await eventually(lambda i=i: i in started, timeout_s=5)
            await eventually(lambda: redis_client.zcard(slow_qs.keys.processing) == 0)
    plain, behind_the_wait = counts
    # The first claim's BLMOVE was sent before the count began; a job may land while the
    # worker is between a reply and its next wait: a few plain claims at most, not one per job.
    assert plain + behind_the_wait <= jobs + 3, counts
    assert behind_the_wait >= jobs - 3, counts
    assert len(round_trips) >= jobs, len(round_trips)
    # Each one the wire's time, not the idle time before the job arrived.
    assert statistics.median(round_trips) < 0.1, round_trips
    assert_invariants(redis_client, slow_qs)


async def test_a_worker_keeping_up_with_its_producer_acks_each_job_in_its_next_wait(
        redis_client: Any, redis_url: str, slow_qs: QueueSettings) -> None:
    # The handler is done before the worker writes its next wait: the ack goes in that write,
    # one round trip per job instead of two (the ack on its own, then the wait).
    registry, started = start_times("ping")
    jobs = 30
    async with idle_worker(redis_client, redis_url, slow_qs, registry) as (worker, producer):
        with acks_seen(redis_client) as counts:
            for i in range(jobs):
                await producer.enqueue("ping", i)
                await eventually(lambda i=i: i in started, timeout_s=5)
                await eventually(lambda: redis_client.zcard(slow_qs.keys.processing) == 0)
            await eventually(lambda: worker.succeeded == jobs)
    alone, ahead_of_a_wait = counts
    # A job may land while the worker is between a reply and its next wait: a few acks then
    # go on their own.
    assert alone + ahead_of_a_wait == jobs, counts
    assert ahead_of_a_wait >= jobs - 3, counts
    assert_invariants(redis_client, slow_qs)


async def test_a_scheduled_job_starts_when_due_after_a_claim_that_leased(
        redis_client: Any, redis_url: str, slow_qs: QueueSettings,
        monkeypatch: pytest.MonkeyPatch) -> None:
    # The claim that leases "now" got fewer jobs than it asked for, so the worker waits next:
    # until "later" is due, not for a whole idle period. (The worker's reaper, which would also
    # promote "later" when due, runs too rarely here to help.)
    monkeypatch.setattr(worker_module, "IDLE_WAIT_S", 30.0)
    registry, started = start_times("stamp")
    async with idle_worker(redis_client, redis_url, slow_qs, registry,
                           reaper_interval_s=30.0) as (_, producer):
        sent = time.perf_counter()
        await producer.enqueue("stamp", "later", delay=0.5)
        await producer.enqueue("stamp", "now")
        await eventually(lambda: "later" in started, timeout_s=10)
    assert started["now"] < started["later"]
    assert 0.5 <= started["later"] - sent < 3.0, started["later"] - sent
    assert_invariants(redis_client, slow_qs)


async def test_a_scheduled_job_is_not_held_back_by_a_wait_decided_before_a_slot_freed(
        redis_client: Any, redis_url: str, slow_qs: QueueSettings,
        monkeypatch: pytest.MonkeyPatch) -> None:
    # One slot and a prefetch buffer of 4 (forced: its size depends on measured timings): the
    # first claim leases "slow" and the three behind it, fewer than the 5 it asked for, so the
    # next claim is to wait until "later" is due; but the worker first waits for its slot, past
    # that time. When the slot frees, "later" is due and must be claimed at once, not after a
    # wait that was decided 1.2 s earlier.
    monkeypatch.setattr(worker_module, "IDLE_WAIT_S", 30.0)
    registry, started = start_times("stamp")
    finished: dict[str, float] = {}

    @registry.handler("slow")
    async def slow(job: Any) -> None:
        await asyncio.sleep(1.2)
        finished["slow"] = time.perf_counter()

    async with idle_worker(redis_client, redis_url, slow_qs, registry, concurrency=1,
                           reaper_interval_s=30.0) as (worker, producer):
        monkeypatch.setattr(worker.prefetch, "size", lambda now: 4)
        await producer.enqueue("stamp", "later", delay=0.6)
        await producer.enqueue_many([("slow", None), ("stamp", "b"), ("stamp", "c"),
                                     ("stamp", "d")])
        await eventually(lambda: "later" in started, timeout_s=10)
    assert started["later"] - finished["slow"] < 0.3, started["later"] - finished["slow"]
    assert_invariants(redis_client, slow_qs)


async def test_a_claim_after_the_scripts_were_flushed_counts_its_wait_as_a_wait(
        redis_client: Any, redis_url: str, slow_qs: QueueSettings,
        monkeypatch: pytest.MonkeyPatch) -> None:
    # Redis lost its scripts (a restart, a failover, SCRIPT FLUSH) during a wait: the claim
    # behind it answers NOSCRIPT and is sent again on its own. The wait before it is not part of
    # that claim's round trip, which sizes the prefetch buffer.
    registry, started = start_times("ping")
    async with idle_worker(redis_client, redis_url, slow_qs, registry) as (worker, producer):
        round_trips = claim_round_trips(worker, monkeypatch)
        redis_client.script_flush()
        waited_from = time.perf_counter()
        # The wait this claim must not count as its round trip: five round trips long.
        await asyncio.sleep(10 * ONE_WAY_S)
        await producer.enqueue("ping", "after the flush")
        await eventually(lambda: "after the flush" in started, timeout_s=5)
        waited_s = time.perf_counter() - waited_from
    assert round_trips, "no claim was measured"
    assert max(round_trips) < waited_s / 2, (round_trips, waited_s)
    assert_invariants(redis_client, slow_qs)
