"""Durable writes (``QueueSettings.durable_replicas``) from producers, on a primary with a replica.

Covers: a durable enqueue and enqueue_many are on the replica when they return (EVALSHA and
WAIT in one round trip, also after SCRIPT FLUSH); with the replica stalled, enqueue raises
NotReplicated within the timeout, naming the job, whose record is on the primary, and a retry
with the same idempotency key then returns that job; enqueue_many reports what it wrote;
cancel and replay are durable too; the API answers 503 ``not_replicated``; a Redis Cluster
client is refused at once.
"""

from __future__ import annotations

import re
import signal
import time
from collections.abc import Iterator
from typing import Any

import pytest
import redis
from aiohttp.test_utils import TestClient, TestServer
from antre import NotReplicated, Queue, QueueSettings, api, cli, connection
from redis_servers import RedisServer, replicated_redis

#: Generous for calls that must be confirmed (a loaded machine stalls a process for a second
#: now and then); short for calls made while the replica is stopped.
DURABLE = QueueSettings(name="durable", durable_replicas=1, durable_timeout_s=10.0)
IMPATIENT = QueueSettings(name="durable", durable_replicas=1, durable_timeout_s=0.3)


@pytest.fixture
def replicated() -> Iterator[tuple[RedisServer, RedisServer]]:
    with replicated_redis(1) as (primary, [replica]):
        yield primary, replica


@pytest.fixture
def queue(replicated: tuple[RedisServer, RedisServer]) -> Iterator[Queue]:
    durable = Queue(connection.connect(replicated[0].url), settings=DURABLE)
    yield durable
    durable.close()


@pytest.fixture
def impatient(queue: Queue) -> Queue:
    """The same queue and client, waiting 0.3 s for confirmations."""
    return Queue(queue.redis, settings=IMPATIENT)


def on_replica(replica: RedisServer, queue: Queue, job_id: str) -> bool:
    """Whether the server has the job: its queued field, or its key (a job claimed, or queued
    with no worker of this version registered)."""
    with redis.Redis(port=replica.port, decode_responses=True) as client:
        return bool(client.hexists(queue.keys.queued, job_id) or client.exists(queue.keys.job(job_id)))


def test_a_durable_enqueue_is_on_the_replica_when_it_returns(
        queue: Queue, replicated: tuple[RedisServer, RedisServer]) -> None:
    queue.redis.script_flush()  # the EVAL fallback is durable too
    one = queue.enqueue("t", {"n": 1})
    many = queue.enqueue_many([("t", {"n": i}) for i in range(1200)])  # three script calls
    for result in [one, many[0], many[499], many[500], many[-1]]:
        assert on_replica(replicated[1], queue, result.job_id)


def test_unconfirmed_enqueue_names_its_job_and_a_keyed_retry_returns_it(
        queue: Queue, impatient: Queue, replicated: tuple[RedisServer, RedisServer]) -> None:
    primary, replica = replicated
    assert replica.process is not None
    replica.process.send_signal(signal.SIGSTOP)
    try:
        started = time.monotonic()
        with pytest.raises(NotReplicated) as caught:
            impatient.enqueue("t", {"n": 1}, idempotency_key="order-7")
        assert 0.25 <= time.monotonic() - started < 5
    finally:
        replica.process.send_signal(signal.SIGCONT)
    unconfirmed = caught.value
    assert unconfirmed.confirmed == 0 and unconfirmed.wanted == 1
    job_id = unconfirmed.result.job_id  # type: ignore[attr-defined]
    assert job_id in str(unconfirmed) and "same idempotency key" in str(unconfirmed)
    assert on_replica(primary, queue, job_id)  # written on the primary, only not confirmed
    again = queue.enqueue("t", {"n": 1}, idempotency_key="order-7")
    assert (again.job_id, again.created) == (job_id, False)
    assert on_replica(replica, queue, job_id)


def test_the_cli_says_an_unconfirmed_enqueue_was_written_not_that_redis_is_unreachable(
        queue: Queue, replicated: tuple[RedisServer, RedisServer],
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    """``antre enqueue`` on a durable queue whose replica is stalled: the job is on the primary,
    so the one line says so (and how to retry), never that Redis could not be reached."""
    primary, replica = replicated
    monkeypatch.setenv("ANTRE_DURABLE_REPLICAS", "1")
    monkeypatch.setenv("ANTRE_DURABLE_TIMEOUT", "0.3")
    assert replica.process is not None
    replica.process.send_signal(signal.SIGSTOP)
    try:
        code = cli.main(["enqueue", "--redis-url", primary.url, "--queue", "durable",
                         "--idempotency-key", "order-9", "t", "{}"])
    finally:
        replica.process.send_signal(signal.SIGCONT)
    out, err = capsys.readouterr()
    assert code == 69 and not out and err.count("\n") == 1, err
    assert "unreachable" not in err, err
    assert err.startswith("antre enqueue: enqueue: written on the primary but confirmed by 0 of 1")
    assert "same idempotency key" in err
    assert queue.stats().ready == 1


def test_unconfirmed_enqueue_many_reports_what_it_wrote(
        queue: Queue, impatient: Queue, replicated: tuple[RedisServer, RedisServer]) -> None:
    replica = replicated[1]
    assert replica.process is not None
    replica.process.send_signal(signal.SIGSTOP)
    try:
        with pytest.raises(NotReplicated) as caught:
            impatient.enqueue_many([("t", {"n": i}) for i in range(10)])
    finally:
        replica.process.send_signal(signal.SIGCONT)
    written = caught.value.result
    assert isinstance(written, list) and len(written) == 10
    assert queue.stats().ready == 10


def test_cancel_and_replay_are_durable(queue: Queue, impatient: Queue,
                                       replicated: tuple[RedisServer, RedisServer]) -> None:
    job = queue.enqueue("t")
    replica = replicated[1]
    assert replica.process is not None
    replica.process.send_signal(signal.SIGSTOP)
    try:
        with pytest.raises(NotReplicated):
            impatient.cancel(job.job_id)
        # By id: a replay of "the oldest" with nothing dead now sends nothing to confirm.
        with pytest.raises(NotReplicated):
            impatient.replay([job.job_id])
    finally:
        replica.process.send_signal(signal.SIGCONT)


async def test_the_api_answers_503_not_replicated(
        replicated: tuple[RedisServer, RedisServer]) -> None:
    redis_client = connection.connect_async(replicated[0].url)
    app = api.create_app(
        redis_client, queue_template=QueueSettings(durable_replicas=2, durable_timeout_s=0.1),
        api_settings=api.ApiSettings(queues=("q",), anonymous=True))
    client: TestClient[Any, Any] = TestClient(TestServer(app))
    await client.start_server()
    try:
        response = await client.post("/v1/queues/q/jobs", json={"type": "t",
                                                                "idempotency_key": "k1"})
        body = await response.json()
        assert response.status == 503 and response.headers["Retry-After"]
        assert body["error"] == "not_replicated"
        # The one replica may or may not make the 0.1 s on a loaded machine; two never can.
        assert re.search(r"confirmed by [01] of 2 replica\(s\)", body["message"]), body
    finally:
        await client.close()
        await redis_client.aclose()
