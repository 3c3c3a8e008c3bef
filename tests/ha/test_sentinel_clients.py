"""Clients from ``redis+sentinel://`` URLs against a real Sentinel group.

Covers: the sync and asyncio clients follow two kill -9 failovers in a row without losing a
write that both replicas had; the HTTP API keeps enqueueing across a failover; a graceful
failover (the old primary alive, demoted) moves the queue's writes to the new primary; a
``READONLY`` reply means "find the primary again" (a retryable outage), never a write to a
replica; Sentinels with a password of their own; one clear line for a service name no
Sentinel knows.
"""

from __future__ import annotations

from typing import Any

import pytest
import redis
from aiohttp.test_utils import TestClient, TestServer
from antre import Queue, QueueSettings, api, cli, connection, errors
from redis_sentinels import SERVICE, SentinelGroup, SentinelProcess
from redis_servers import free_port, wait_until


def _port_of(client: redis.Redis) -> int:
    return int(client.info("server")["tcp_port"])


async def test_sync_and_asyncio_clients_follow_two_failovers(sentinels: SentinelGroup) -> None:
    client = connection.connect(sentinels.url())
    aclient = connection.connect_async(sentinels.url())
    try:
        assert _port_of(client) == sentinels.primary_port()
        client.set("counter", 1)
        await aclient.set("acounter", 1)
        client.wait(2, 2000)  # both replicas have them before the primary is killed
        await aclient.wait(2, 2000)
        for expected in (2, 3):
            failover = sentinels.fail_over()
            # The first call after the switch reconnects through the Sentinels.
            assert client.incr("counter") == expected
            assert await aclient.incr("acounter") == expected
            primary = sentinels.primary_port()
            assert _port_of(client) == primary != failover.killed_port
            assert int((await aclient.info("server"))["tcp_port"]) == primary
            client.wait(2, 2000)
            await aclient.wait(2, 2000)
    finally:
        client.close()
        await aclient.aclose()


def test_queue_writes_move_to_the_new_primary_after_a_graceful_failover(
        sentinels: SentinelGroup) -> None:
    queue = Queue.from_url(sentinels.url(), "ha")
    try:
        first = queue.enqueue("t", {"n": 1})
        queue.redis.wait(2, 2000)  # SENTINEL FAILOVER does not wait for the replicas to catch up
        old_port = sentinels.primary_port()
        with sentinels.sentinels[0].client() as sentinel:
            sentinel.sentinel_failover(SERVICE)
        new_port = sentinels.wait_promoted(old_port)
        with redis.Redis(port=old_port, decode_responses=True) as demoted:
            # Sentinel demotes the old primary once the new one is promoted; from then on it
            # answers READONLY to writes, and the queue's writes go to the new primary.
            wait_until(lambda: demoted.info("replication")["role"] == "slave", timeout_s=20,
                       message="the old primary to be demoted")
            second = queue.enqueue("t", {"n": 2})
            with pytest.raises(redis.ReadOnlyError):
                demoted.set("probe", 1)
        with redis.Redis(port=new_port, decode_responses=True) as primary:
            for job_id in (first.job_id, second.job_id):  # a field, or a Hash (no worker)
                assert primary.hexists(queue.keys.queued, job_id) or primary.exists(
                    queue.keys.job(job_id))
        assert queue.stats().ready == 2
    finally:
        queue.close()


async def test_the_api_follows_a_failover(sentinels: SentinelGroup) -> None:
    redis_client = connection.connect_async(sentinels.url())
    app = api.create_app(redis_client, queue_template=QueueSettings(),
                         api_settings=api.ApiSettings(queues=("q",), anonymous=True))
    client: TestClient[Any, Any] = TestClient(TestServer(app))
    await client.start_server()
    try:
        before = await client.post("/v1/queues/q/jobs", json={"type": "t"})
        assert before.status == 202, await before.text()
        await redis_client.wait(2, 2000)
        sentinels.fail_over()
        after = await client.post("/v1/queues/q/jobs", json={"type": "t"})
        assert after.status == 202, await after.text()
        stats = await (await client.get("/v1/queues/q/stats")).json()
        assert stats["ready"] == 2
    finally:
        await client.close()
        await redis_client.aclose()


def test_a_readonly_reply_is_an_outage_to_retry_not_a_write_to_a_replica(
        sentinels: SentinelGroup) -> None:
    # A Sentinel that (for a moment) names a replica as the primary of "ghost": what a client
    # meets when it reaches a server demoted a moment ago.
    replica_port = next(port for port in sentinels.live_ports()
                        if port != sentinels.primary_port())
    with sentinels.sentinels[0].client() as sentinel:
        sentinel.sentinel_monitor("ghost", "127.0.0.1", replica_port, 1)
    client = connection.connect(
        f"redis+sentinel://127.0.0.1:{sentinels.sentinels[0].port}/ghost")
    try:
        with pytest.raises(errors.RedisUnavailable) as caught:
            Queue(client, "ha").enqueue("t")
        assert not isinstance(caught.value, errors.RedisRefused)
        assert "slave" in str(caught.value) or "replica" in str(caught.value)
        with redis.Redis(port=replica_port, decode_responses=True) as replica:
            assert replica.dbsize() == 0
    finally:
        client.close()
        with sentinels.sentinels[0].client() as sentinel:
            sentinel.sentinel_remove("ghost")


def test_sentinels_with_a_password_of_their_own(sentinels: SentinelGroup) -> None:
    guarded = SentinelProcess(sentinels.dir, port=free_port(), my_id="f" * 40)
    guarded.start(primary_port=sentinels.primary_port(), replica_ports=[], peers=[],
                  extra_lines=("requirepass s3cret-sentinel",))
    try:
        base = f"redis+sentinel://127.0.0.1:{guarded.port}/{SERVICE}"
        with_password = connection.connect(base + "?sentinel_password=s3cret-sentinel")
        try:
            assert with_password.ping()
        finally:
            with_password.close()
        without = connection.connect(base)
        try:
            with pytest.raises(redis.ConnectionError) as caught:
                without.ping()
            message = connection.describe_unreachable(base, caught.value)
            assert "sentinel_password" in message
        finally:
            without.close()
    finally:
        guarded.kill()


def test_an_unknown_service_is_one_clear_line(sentinels: SentinelGroup,
                                              capsys: pytest.CaptureFixture[str]) -> None:
    url = f"redis+sentinel://{sentinels.sentinel_hosts}/nosuch"
    assert cli.main(["stats", "--redis-url", url, "--queue", "ha"]) == 69
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1
    assert "service 'nosuch'" in err and "SENTINEL MASTERS" in err
