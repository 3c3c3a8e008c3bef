"""Measuring a queue through the antre package, against a real Redis.

Aspects: depth in one script call (ready, due, processing, dead, oldest age); jobs in flight per
pod from the records of the jobs in flight and the worker registry; an unreachable Redis becomes
RedisReadError with the password redacted and a deadline; the eviction-policy check.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import antre
import pytest
import redis
import redis.asyncio
from antre.protocol import scripts
from antre.protocol.claim import claim_op
from antre.protocol.extend_lease import extend_lease_op
from antre.settings import QueueSettings, WorkerSettings
from antre_operator import backlog, reply_cap
from hostile_redis import bulk, depth_reply, flooding_server
from redis_servers import eventually, free_port, running_redis, script_calls


async def test_depth_in_one_round_trip(redis_url: str, redis_client: redis.Redis) -> None:
    antre.Queue(redis_client, "depth").enqueue_many([("noop", {})] * 7)
    reader = backlog.QueueReader(redis_url, queue="depth", prefix="antre", timeout_s=2)
    try:
        await reader.read()  # loads the script once
        before = script_calls(redis_client)
        reading = await reader.read()
        assert script_calls(redis_client) - before == 1
    finally:
        await reader.close()
    assert reading.numbers.ready == 7 and reading.numbers.backlog == 7
    assert reading.numbers.processing == 0 and reading.in_flight == 0
    assert reading.numbers.oldest_ready_age_s is not None and reading.numbers.oldest_ready_age_s >= 0


async def test_jobs_in_flight_by_pod(redis_url: str, redis_client: redis.Redis) -> None:
    """Counted from the jobs' records (who holds each lease now), not from the registry's
    counts, which are as old as each worker's last heartbeat."""
    settings = QueueSettings(name="reg")
    antre.Queue(redis_client, "reg").enqueue_many([("noop", {})] * 4)
    client = redis.asyncio.Redis.from_url(redis_url, decode_responses=True)
    try:
        # w1 claimed 2 jobs and w2 one since their last beats, which said 0, 5 and 0.
        for worker_id, pod, claims, stale in (("w1", "p-a", 2, 0), ("w2", "p-a", 1, 5),
                                              ("w3", "p-b", 0, 0)):
            entry = {"pod": pod, "host": pod, "pid": 1, "in_flight": stale,
                     "concurrency": 4, "started_at_ms": int(time.time() * 1000)}
            await scripts.run_async(client, extend_lease_op(
                settings, [], lease_ms=60_000, worker_id=worker_id,
                registry_entry_json=json.dumps(entry), registry_ttl_ms=60_000))
            if claims:
                await scripts.run_async(client, claim_op(
                    settings, WorkerSettings(), worker_id=worker_id, max_jobs=claims))
        # A job held by a worker without a live entry (gone) belongs to no pod.
        await scripts.run_async(client, claim_op(settings, WorkerSettings(), worker_id="gone",
                                                 max_jobs=1))
    finally:
        await client.aclose()
    reader = backlog.QueueReader(redis_url, queue="reg", prefix="antre", timeout_s=2)
    try:
        assert await reader.jobs_in_flight_by_pod() == {"p-a": 3, "p-b": 0}
    finally:
        await reader.close()


async def test_unreachable_redis_is_a_read_error_without_the_password() -> None:
    url = f"redis://:hunter2@127.0.0.1:{free_port()}/0"
    reader = backlog.QueueReader(url, queue="q", prefix="antre", timeout_s=1)
    started = time.monotonic()
    try:
        with pytest.raises(backlog.RedisReadError) as info:
            await reader.read()
    finally:
        await reader.close()
    assert "hunter2" not in str(info.value) and "***" in str(info.value)
    assert time.monotonic() - started < 3


@pytest.mark.parametrize("policy", ["volatile-lru", "allkeys-lfu"])
async def test_eviction_policy_warning(policy: str) -> None:
    with running_redis("--maxmemory-policy", policy) as server:
        reader = backlog.QueueReader(server.url, queue="q", prefix="antre", timeout_s=2)
        try:
            warning = await reader.eviction_warning()
        finally:
            await reader.close()
    assert warning is not None and repr(policy) in warning, "a known policy is named"


async def test_an_info_without_the_policy_is_unreadable_not_safe() -> None:
    """A proxy or a server that only speaks the protocol may answer INFO without
    maxmemory_policy. That is no evidence of noeviction: the reader reports it as it reports a
    refused INFO (RedisConfigured Unknown), never as a safe policy."""
    info = bulk(b"# Memory\r\nused_memory:1024\r\nmaxmemory:0\r\n")
    async with flooding_server(10, {b"INFO": info}) as (port, _):
        reader = backlog.QueueReader(f"redis://127.0.0.1:{port}/0", queue="q", prefix="antre",
                                     timeout_s=2)
        try:
            with pytest.raises(backlog.RedisRefused):
                await reader.eviction_warning()
        finally:
            await reader.close()


@pytest.mark.parametrize("url", [
    "redis://:pa/ss@127.0.0.1:{port}/0",
    "redis://127.0.0.1:{port}/0?password=pa/ss",
    "redis://u:pa/ss@127.0.0.1:{port}/0?password=pa/ss",
    "nosuchscheme://:pa/ss@127.0.0.1:{port}/0",
])
async def test_errors_never_carry_the_password(url: str) -> None:
    error = await failed_read(url.format(port=free_port()), timeout_s=1)
    assert "pa/ss" not in str(error)
    assert "ss@" not in str(error)


@contextlib.asynccontextmanager
async def fake_server(answer: bytes | None) -> AsyncIterator[int]:
    """A TCP server that sends ``answer`` to whatever it is told (None: says nothing)."""
    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.read(100)
        if answer is None:
            await reader.read()  # silent until the client gives up and hangs up
        else:
            writer.write(answer)
            await writer.drain()
        writer.close()

    server = await asyncio.start_server(handle, "127.0.0.1", 0)
    try:
        yield server.sockets[0].getsockname()[1]
    finally:
        server.close()


async def failed_read(url: str, *, timeout_s: float,
                      read: Callable[[backlog.QueueReader], Awaitable[Any]] = backlog.QueueReader.read,
                      ) -> backlog.RedisReadError:
    """What ``read`` (the depth by default) of a queue at ``url`` raises."""
    reader = backlog.QueueReader(url, queue="q", prefix="antre", timeout_s=timeout_s)
    try:
        with pytest.raises(backlog.RedisReadError) as info:
            await read(reader)
    finally:
        await reader.close()
    return info.value


async def read_error(port: int, timeout_s: float = 0.5) -> backlog.RedisReadError:
    """What reading a queue at 127.0.0.1:``port`` raises."""
    return await failed_read(f"redis://127.0.0.1:{port}/0", timeout_s=timeout_s)


@pytest.mark.parametrize("answer", [
    pytest.param(b"SSH-2.0-OpenSSH_9.6 banner-of-the-host\r\n", id="ssh-banner"),
    pytest.param(b"HTTP/1.1 400 Bad Request\r\nServer: banner-of-the-host\r\n\r\n", id="http"),
    pytest.param(b"-ERR banner-of-the-host\r\n", id="error-line"),
    pytest.param(b"+banner-of-the-host\r\n", id="status-line"),
    pytest.param(None, id="silent"),
    pytest.param(b"", id="closed-at-once"),
])
async def test_whatever_answers_the_status_message_is_the_same(answer: bytes | None) -> None:
    """A JobQueue author pointing the operator at hosts and ports learns nothing from the
    status but "no Redis answered" (or a bare Redis error code), never a server's bytes."""
    async with fake_server(answer) as port:
        error = await read_error(port)
    message = str(error)
    assert "banner-of-the-host" not in message
    if answer is not None and answer.startswith(b"-"):
        # An error reply is Redis's own syntax: a bare "refused", with a code only when it is
        # an upper-case word (NOPERM, OOM), never the rest of the line.
        assert message == f"redis://127.0.0.1:{port}/0: Redis refused the command", message
    else:
        assert message == f"redis://127.0.0.1:{port}/0: {backlog.NO_REDIS_MESSAGE}", message


async def test_a_closed_port_reads_like_a_foreign_server() -> None:
    port = free_port()
    error = await read_error(port)
    assert str(error) == f"redis://127.0.0.1:{port}/0: {backlog.NO_REDIS_MESSAGE}"
    assert "Error 111" in error.detail, error.detail  # the log has the cause


async def test_a_reply_larger_than_any_queue_needs_is_not_read() -> None:
    """One operator serves every JobQueue: a Redis a JobQueue names (its author's own server)
    must not be able to fill the operator's memory by answering the depth read with hundreds of
    megabytes. The read stops at MAX_REPLY_BYTES and fails like any answer that is not Redis's."""
    flood, hung_up = 200 * 1024 * 1024, asyncio.Event()
    async with flooding_server(flood, hung_up=hung_up) as (port, sent):
        error = await read_error(port, timeout_s=30)
        assert backlog.NO_REDIS_MESSAGE in str(error)
        assert "longer than" in error.detail
        # What the server got out before the connection was dropped: the cap, plus what the
        # kernel's socket buffers hold (a few MB on loopback), far from the whole reply.
        await eventually(hung_up.is_set, timeout_s=5, message="the server to see the client go")
        assert sum(sent) < reply_cap.MAX_REPLY_BYTES + 24 * 1024 * 1024 < flood


async def test_a_reply_of_the_wrong_shape_reads_as_no_redis() -> None:
    """A server that passes the handshake and answers the depth script with a string: the
    same words as any other server that is not Redis, not a traceback of the parser."""
    async with flooding_server(10) as (port, _):
        error = await read_error(port)
    assert backlog.NO_REDIS_MESSAGE in str(error)


async def test_a_thousand_replies_share_the_cap_of_one_read() -> None:
    """The pods of the jobs in flight are found with one pipeline of up to 1,001 HGETs: each
    reply under the cap, a thousand of them far over it. The replies of one read share it."""
    ids = b"*10\r\n" + b"".join(b"$2\r\nj%d\r\n" % i for i in range(10))
    no_workers = b"*3\r\n:1\r\n:0\r\n:-2\r\n"  # workers.lua: the registry is empty
    each, hung_up = 7 * 1024 * 1024, asyncio.Event()
    async with flooding_server(each, {b"EVALSHA": no_workers, b"ZRANGE": ids},
                               hung_up=hung_up) as (port, sent):
        error = await failed_read(f"redis://127.0.0.1:{port}/0", timeout_s=30,
                                  read=backlog.QueueReader.jobs_in_flight_by_pod)
        assert "longer than" in error.detail
        await eventually(hung_up.is_set, timeout_s=5, message="the server to see the client go")
        assert sum(sent) < reply_cap.MAX_REPLY_BYTES + 24 * 1024 * 1024 < 10 * each


async def test_a_hostile_eviction_policy_is_not_quoted() -> None:
    """A server of the JobQueue author's own answers ``INFO memory`` with a policy of 7 MiB
    (under the reply cap): the warning names no such text and stays short, so the status patch
    that carries it is far below what the API server accepts."""
    policy = b"A" * (7 * 1024 * 1024)
    info = b"# Memory\r\nmaxmemory_policy:" + policy + b"\r\n"
    answers = {b"INFO": bulk(info)}
    async with flooding_server(10, answers) as (port, _):
        reader = backlog.QueueReader(f"redis://127.0.0.1:{port}/0", queue="q", prefix="antre",
                                     timeout_s=30)
        try:
            warning = await reader.eviction_warning()
        finally:
            await reader.close()
    assert warning is not None and "AAAA" not in warning and len(warning) < 400, warning[:400]
    assert "not a policy Redis knows" in warning



HUGE = b"9" * 400


@pytest.mark.parametrize("reply", [
    pytest.param(depth_reply(oldest_age_ms=HUGE), id="oldest-age"),
    pytest.param(depth_reply(ready=HUGE), id="ready-count"),
])
async def test_a_huge_number_in_the_depth_reply_reads_as_no_redis(reply: bytes) -> None:
    """A 400-digit count in an otherwise well-formed reply: "no Redis answered", like any reply
    of a shape no Redis gives, not an OverflowError out of the reader (or out of the scaling
    maths the count would reach)."""
    async with flooding_server(10, {b"EVALSHA": reply}) as (port, _):
        error = await read_error(port, timeout_s=5)
    assert str(error) == f"redis://127.0.0.1:{port}/0: {backlog.NO_REDIS_MESSAGE}"
    assert "out of range" in error.detail and "999" not in error.detail, error.detail


@pytest.mark.parametrize("registry", [
    pytest.param(b"*3\r\n" + bulk(HUGE) + b":0\r\n:-2\r\n", id="server-time"),
    pytest.param(b"*7\r\n:1\r\n:0\r\n:-2\r\n$1\r\nw\r\n$3\r\ninf\r\n"
                 + bulk(b'{"pod": "p", "in_flight": 1' + b"0" * 400 + b"}") + b":1\r\n",
                 id="worker-entry"),
])
async def test_a_huge_number_in_the_worker_registry_fails_no_read(registry: bytes) -> None:
    """In the registry's own numbers it fails the read like the depth's; in one worker's
    entry it makes that entry unreadable (as a bad entry always did), not the read."""
    async with flooding_server(10, {b"EVALSHA": registry, b"ZRANGE": b"*0\r\n"}) as (port, _):
        reader = backlog.QueueReader(f"redis://127.0.0.1:{port}/0", queue="q", prefix="antre",
                                     timeout_s=5)
        try:
            if registry.startswith(b"*3"):
                with pytest.raises(backlog.RedisReadError, match="no Redis answered"):
                    await reader.jobs_in_flight_by_pod()
            else:
                assert await reader.jobs_in_flight_by_pod() == {}
        finally:
            await reader.close()
