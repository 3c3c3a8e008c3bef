"""The worker's loops write commands to their own connection and read the replies from its parser
(antre.direct_connection), keeping what redis-py's layers gave them: the same results and
errors, a deadline on every reply, a dropped connection dialled again, the health check of an
idle connection, and a connection class's own way of reading replies."""

from __future__ import annotations

import asyncio
import contextlib
import enum
import select
import signal
import time
from collections.abc import AsyncIterator
from typing import Any

import pytest
import redis
import redis.asyncio
from antre import Queue, connection, errors
from antre.direct_connection import DirectConnection
from antre.idle_wait import IdleWait
from antre.protocol import scripts
from antre.protocol.claim import ClaimResult, claim_op
from antre.settings import QueueSettings, WorkerSettings
from redis_servers import eventually, running_redis, wait_until

QS = QueueSettings(name="direct")


def _claim() -> scripts.Op[ClaimResult]:
    return claim_op(QS, WorkerSettings(), worker_id="w-direct", max_jobs=5)


@contextlib.asynccontextmanager
async def driven(client: Any) -> AsyncIterator[DirectConnection]:
    """A DirectConnection on ``client``; its connection given back and the client closed after."""
    direct = DirectConnection(client)
    try:
        yield direct
    finally:
        await direct.release()
        await client.aclose()


def _enqueue(redis_url: str, count: int) -> list[str]:
    queue = Queue.from_url(redis_url, settings=QS)
    try:
        return [queue.enqueue("noop", {"n": n}).job_id for n in range(count)]
    finally:
        queue.close()


async def test_a_script_call_answers_as_through_the_client(redis_url: str,
                                                           redis_client: Any) -> None:
    ids = _enqueue(redis_url, 2)
    async with driven(connection.connect_async(redis_url)) as direct:
        first = await direct.run(_claim())
        again = await scripts.run_async(direct.client, _claim())
    assert sorted(job.id for job in first.jobs) == sorted(ids)
    assert again.jobs == []


async def test_a_script_flushed_from_redis_is_loaded_again(redis_url: str,
                                                          redis_client: Any) -> None:
    async with driven(connection.connect_async(redis_url)) as direct:
        await direct.run(_claim())
        redis_client.script_flush()
        ids = _enqueue(redis_url, 1)
        assert [job.id for job in (await direct.run(_claim())).jobs] == ids


async def test_a_reply_later_than_the_socket_timeout_closes_the_connection(
        redis_url: str, redis_client: Any) -> None:
    async with driven(connection.connect_async(redis_url, socket_timeout=0.3)) as direct:
        await direct.send([("BLPOP", "never-pushed", 3)])
        started = time.monotonic()
        with pytest.raises(redis.TimeoutError):
            await direct.read()
        assert time.monotonic() - started < 1.5
        # The reply of that BLPOP must never be read as the next call's: a new connection.
        ids = _enqueue(redis_url, 1)
        assert [job.id for job in (await direct.run(_claim())).jobs] == ids


async def test_a_reply_within_a_longer_timeout_is_read(redis_url: str,
                                                      redis_client: Any) -> None:
    socket_timeout_s = 0.3
    async with driven(connection.connect_async(redis_url, socket_timeout=socket_timeout_s)) as direct:
        await direct.send([("BLPOP", "pushed-later", 2)])
        await asyncio.sleep(socket_timeout_s + 0.2)  # past the socket timeout, before the read's own
        redis_client.rpush("pushed-later", "x")
        assert await direct.read(timeout_s=2.5) == ["pushed-later", "x"]


async def test_a_connection_the_server_closed_is_dialled_again(redis_url: str,
                                                              redis_client: Any) -> None:
    async with driven(connection.connect_async(redis_url)) as direct:
        await direct.send([("CLIENT", "ID")])
        connection_id = await direct.read()
        assert redis_client.client_kill_filter(_id=connection_id) == 1
        # Closed while idle, as between two of a loop's calls: the close has reached us.
        kept = await direct.connection()
        await eventually(lambda: kept._reader.at_eof(), timeout_s=5,
                         message="the server's close seen by the connection")
        ids = _enqueue(redis_url, 1)
        assert [job.id for job in (await direct.run(_claim())).jobs] == ids


async def test_a_connection_marked_for_reconnect_is_dialled_again(redis_url: str,
                                                                  redis_client: Any) -> None:
    async with driven(connection.connect_async(redis_url)) as direct:
        await direct.send([("CLIENT", "ID")])
        before = await direct.read()
        kept = await direct.connection()
        kept.mark_for_reconnect()  # as a MOVING maintenance notification does
        ids = _enqueue(redis_url, 1)
        assert [job.id for job in (await direct.run(_claim())).jobs] == ids
        assert not kept.should_reconnect()
        await direct.send([("CLIENT", "ID")])
        assert await direct.read() != before


class _Attempts(enum.IntEnum):
    THREE = 3


async def test_arguments_hiredis_does_not_take_are_sent_or_refused_as_redis_py_does(
        redis_url: str, redis_client: Any) -> None:
    async with driven(connection.connect_async(redis_url)) as direct:
        await direct.send([("SET", "attempts", _Attempts.THREE), ("GET", "attempts")])
        assert await direct.read() == "OK"
        await direct.client.set("through-the-client", _Attempts.THREE)
        assert await direct.read() == await direct.client.get("through-the-client")
        with pytest.raises(redis.DataError):
            await direct.send([("SET", "nothing", None)])
        await direct.send([("PING",)])  # nothing of the refused command was written
        assert await direct.read() in ("PONG", True)


def _pings(redis_client: Any) -> int:
    return int(redis_client.info("commandstats").get("cmdstat_ping", {}).get("calls", 0))


async def test_a_connection_idle_past_the_health_check_interval_is_pinged_first(
        redis_url: str, redis_client: Any) -> None:
    async with driven(connection.connect_async(redis_url, health_check_interval=1)) as direct:
        await direct.run(_claim())
        pings = _pings(redis_client)
        await direct.run(_claim())
        assert _pings(redis_client) == pings  # used within the interval: no PING
        kept, loop = await direct.connection(), asyncio.get_running_loop()
        await eventually(lambda: loop.time() > kept.next_health_check, timeout_s=5,
                         message="the health check due")
        await direct.run(_claim())
        assert _pings(redis_client) == pings + 1


class _CountingReads(redis.asyncio.Connection):
    """Reads replies its own way, as Sentinel's connections do (a READONLY reply reconnects)."""

    reads = 0

    async def read_response(self, *args: Any, **kwargs: Any) -> Any:
        _CountingReads.reads += 1
        return await super().read_response(*args, **kwargs)


async def test_a_connection_class_that_reads_its_own_way_is_left_to_read(
        redis_url: str, redis_client: Any) -> None:
    _CountingReads.reads = 0
    reading_its_own_way = redis.asyncio.Redis.from_url(redis_url, decode_responses=True,
                                                       connection_class=_CountingReads)
    async with driven(reading_its_own_way) as direct:
        ids = _enqueue(redis_url, 1)
        assert [job.id for job in (await direct.run(_claim())).jobs] == ids
        assert _CountingReads.reads >= 1
        reads = _CountingReads.reads
        await direct.send([("PING",)])
        assert await direct.read() in ("PONG", True)
        assert _CountingReads.reads == reads + 1


async def test_a_reply_later_than_its_own_timeout_fails_on_a_connection_reading_its_own_way(
        redis_url: str, redis_client: Any) -> None:
    # redis-py's read_response(timeout=...) answers None past its timeout and keeps the
    # connection, the reply still to come: read as a nil reply, and the next read its own.
    reading_its_own_way = redis.asyncio.Redis.from_url(
        redis_url, decode_responses=True, socket_timeout=0.3, connection_class=_CountingReads)
    async with driven(reading_its_own_way) as direct:
        await direct.send([("BLPOP", "pushed-too-late", 3)])
        started = time.monotonic()
        with pytest.raises(redis.TimeoutError):
            await direct.read(timeout_s=0.5)
        assert time.monotonic() - started < 1.5
        redis_client.rpush("pushed-too-late", "x")
        await direct.send([("PING",)])  # on a new connection: not the BLPOP's reply
        assert await direct.read() in ("PONG", True)


async def test_a_wait_answered_late_is_an_outage_on_a_connection_reading_its_own_way() -> None:
    # Redis stalls (SIGSTOP) while the idle wait blocks, past the wait's deadline, and answers
    # within the claim's read that follows: the wait's nil reply must not be taken for the
    # claim's, nor the claim's left to be read as the next call's.
    wait_s, socket_timeout_s = 0.5, 1.0
    with running_redis() as server:
        sync = redis.Redis.from_url(server.url, decode_responses=True)
        client = redis.asyncio.Redis.from_url(server.url, decode_responses=True,
                                              socket_timeout=socket_timeout_s,
                                              connection_class=_CountingReads)
        idle = IdleWait(client)
        try:
            waiting = asyncio.create_task(idle.claim_when_ready(QS.keys.ready, _claim(), wait_s))
            await eventually(lambda: sync.info("clients")["blocked_clients"] >= 1,
                             message="the wait blocking in Redis")
            assert server.process is not None
            server.process.send_signal(signal.SIGSTOP)
            # The wait's reply is due wait_s + socket_timeout_s after its read began, the
            # claim's a socket timeout later: Redis stays stalled until half-way between.
            try:
                await asyncio.sleep(wait_s + 1.5 * socket_timeout_s)
            finally:
                server.process.send_signal(signal.SIGCONT)
            with pytest.raises(errors.RedisUnavailable):
                await waiting
            ids = _enqueue(server.url, 1)
            result = await idle.claim_when_ready(QS.keys.ready, _claim(), wait_s)
            assert [job.id for job in result.jobs] == ids
        finally:
            await idle.close()
            await client.aclose()
            sync.close()


async def _read_cancelled(direct: DirectConnection, *, timeout_s: float) -> None:
    """A read under way (a BLPOP never answered) cancelled after 0.1 s: it ends cancelled."""
    await direct.send([("BLPOP", "never-pushed", 5)])
    reading = asyncio.create_task(direct.read(timeout_s=timeout_s))
    await asyncio.sleep(0.1)
    reading.cancel()
    with pytest.raises(asyncio.CancelledError):
        await reading


async def test_a_reply_read_as_its_deadline_passed_leaves_the_next_read_its_own_outcome(
        redis_url: str, redis_client: Any) -> None:
    # The loop held past a read's deadline (an async handler blocking it) while its reply
    # arrived: the timer and the reply come in the same turn, the timer closes the transport
    # and the read still gets its reply. A later read that is cancelled (the worker's stop
    # cancelling the ack loop) must end cancelled, not as a timeout that a retry swallows.
    socket_timeout_s = 0.2
    async with driven(connection.connect_async(redis_url, socket_timeout=socket_timeout_s)) as direct:
        await direct.send([("BLPOP", "pushed-while-held", 5)])
        sock = (await direct.connection())._writer.transport.get_extra_info("socket")
        reading = asyncio.create_task(direct.read())
        # One turn: the read's first step arms its deadline (a socket timeout away), then waits.
        await asyncio.sleep(0)
        time.sleep(socket_timeout_s + 0.1)  # the loop held past the deadline...
        redis_client.rpush("pushed-while-held", "x")
        wait_until(lambda: select.select([sock], [], [], 0)[0], timeout_s=5, interval_s=0.001,
                   message="the reply at the socket, the loop still held")  # ...as it arrives
        assert await reading == ["pushed-while-held", "x"]
        await _read_cancelled(direct, timeout_s=5)
        ids = _enqueue(redis_url, 1)  # and the calls after it get their own replies
        assert [job.id for job in (await direct.run(_claim())).jobs] == ids


def test_a_read_in_a_later_event_loop_keeps_its_deadline(redis_url: str,
                                                        redis_client: Any) -> None:
    # One asyncio.run ends with a read under way (cancelled), its deadline timer armed on that
    # loop; the same connection used under a second asyncio.run must still time out.
    client = connection.connect_async(redis_url, socket_timeout=1.0)
    direct = DirectConnection(client)
    first_deadline_s = 0.3

    async def read_later() -> float:
        await asyncio.sleep(first_deadline_s + 0.2)  # past the first loop's deadline
        try:
            await direct.send([("BLPOP", "never-pushed", 3)])
            started = time.monotonic()
            with pytest.raises(redis.TimeoutError):
                await direct.read(timeout_s=1.0)
            return time.monotonic() - started
        finally:
            await direct.release()
            await client.aclose()

    asyncio.run(_read_cancelled(direct, timeout_s=first_deadline_s))
    assert asyncio.run(read_later()) < 2.5
