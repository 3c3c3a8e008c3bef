"""antre against a local three-node Redis Cluster, reached through ``redis+cluster://``.

Covers, for two queues whose hash tags land in slots served by different nodes: enqueue,
enqueue_many, claim, ack, fail -> retry -> claim again, reap of an expired lease, depth; jobs
still queued as fields (read, cancelled, promoted, claimed beside a queued Hash); then an
in-process :class:`antre.worker.Worker` on the asyncio cluster client draining a few hundred jobs.
Every scenario ends with the queue invariant, read from the node that owns the queue's slot.
Then the eviction check of each client, reader and command: it warns for a queue whose node
evicts, whatever the other nodes' policies.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
import subprocess
import sys
from collections.abc import Iterator

import antre
import pytest
import redis
from antre import HandlerRegistry, Job, Queue, QueueSettings, WorkerSettings, connection
from antre.cli import main
from antre.commands import EXIT_UNAVAILABLE
from antre.protocol import scripts
from antre.protocol.ack import ack_op
from antre.protocol.claim import claim_op
from antre.protocol.fail import fail_op
from antre.snapshots import read_snapshot, read_snapshot_async
from antre.worker import Worker
from invariants import assert_invariants
from redis_clusters import Cluster, redis_cluster
from redis_servers import child_env, eventually, free_port, wait_until
from registered_workers import register_worker


@pytest.fixture(scope="module")
def cluster() -> Iterator[Cluster]:
    with redis_cluster() as running:
        yield running


def queues_on_different_nodes(cluster: Cluster) -> tuple[QueueSettings, QueueSettings]:
    first = QueueSettings(name="orders")
    first_node = cluster.owner(first.keys.ready).connection_pool.connection_kwargs["port"]
    for candidate in ("emails", "invoices", "reports", "thumbnails", "webhooks", "exports"):
        second = QueueSettings(name=candidate)
        if cluster.owner(second.keys.ready).connection_pool.connection_kwargs["port"] != first_node:
            return first, second
    raise AssertionError("no candidate queue name hashes to another node")


@pytest.fixture
def queue_pair(cluster: Cluster) -> Iterator[tuple[QueueSettings, QueueSettings]]:
    pair = queues_on_different_nodes(cluster)
    yield pair
    for node in cluster.nodes:
        with redis.Redis(port=node.port) as client:
            client.flushall()


def check_invariants(cluster: Cluster, settings: QueueSettings) -> None:
    with cluster.owner(settings.keys.ready) as client:
        assert_invariants(client, settings)


def test_protocol_operations_over_the_cluster(
        cluster: Cluster, queue_pair: tuple[QueueSettings, QueueSettings]) -> None:
    client = connection.connect(cluster.url)
    assert isinstance(client, redis.cluster.RedisCluster)
    short_lease = WorkerSettings(visibility_timeout_s=1.0)
    slots = {client.keyslot(settings.keys.ready) for settings in queue_pair}
    assert len(slots) == 2, "the two queues must hash to different slots"

    for settings in queue_pair:
        queue = Queue(client, settings=settings)
        first = queue.enqueue("work", {"n": 0}, idempotency_key=f"{settings.name}-0")
        assert first.created
        assert queue.enqueue("work", {"n": 0}, idempotency_key=f"{settings.name}-0") == type(first)(
            first.job_id, False), "idempotent enqueue returns the existing job"
        many = queue.enqueue_many([("work", {"n": n}) for n in range(1, 6)])
        assert len({r.job_id for r in many}) == 5
        assert queue.stats().ready == 6

        # claim + ack
        claimed = scripts.run(client, claim_op(settings, short_lease, worker_id="w1", max_jobs=2)).jobs
        assert [job.id for job in claimed] == [first.job_id, many[0].job_id], "FIFO"
        acks = scripts.run(client, ack_op(settings, [(j.id, j.lease) for j in claimed], worker_id="w1")).held
        assert acks == [True, True]
        assert queue.get(first.job_id).status == "done"

        # fail -> retry -> claimed again with the next attempt
        [job] = scripts.run(client, claim_op(settings, short_lease, worker_id="w1", max_jobs=1)).jobs
        failed = scripts.run(client, fail_op(settings, (job.id, job.lease), error="boom",
                                             retry_delay_ms=0, worker_id="w1"))
        assert failed.outcome == "retrying"
        assert queue.get(job.id).status == "retrying"
        [again] = scripts.run(client, claim_op(settings, short_lease, worker_id="w2", max_jobs=1)).jobs
        assert again.id == job.id and again.attempt == 2
        assert scripts.run(client, ack_op(settings, [(again.id, again.lease)], worker_id="w2")).held == [True]

        # reap: a lease left to expire is requeued, and its late ack refused
        [lost] = scripts.run(client, claim_op(settings, short_lease, worker_id="w3", max_jobs=1)).jobs
        wait_until(lambda queue=queue: queue.stats().expired_leases == 1, timeout_s=5,
                   message="the lease to expire")
        assert queue.reap().requeued == 1
        assert queue.get(lost.id).status == "queued"
        assert scripts.run(client, ack_op(settings, [(lost.id, lost.lease)], worker_id="w3")).held == [False]

        depth = queue.stats()
        assert (depth.ready, depth.processing, depth.scheduled, depth.dead) == (3, 0, 0, 0)
        assert depth.counters["done"] == 3
        check_invariants(cluster, settings)
    client.close()


def test_queued_jobs_over_the_cluster(
        cluster: Cluster, queue_pair: tuple[QueueSettings, QueueSettings]) -> None:
    """Jobs not claimed yet are fields of the queue's queued Hash, in the queue's slot: read,
    cancelled, promoted when delayed, and claimed beside a queued Hash of the older layout."""
    client = connection.connect(cluster.url)
    settings = queue_pair[1]
    queue = Queue(client, settings=settings)
    assert client.keyslot(settings.keys.queued) == client.keyslot(settings.keys.ready)
    register_worker(client, settings)  # served by this version: enqueue writes fields
    fresh = queue.enqueue("work", {"n": 1}, idempotency_key="once").job_id
    delayed = queue.enqueue("work", {"n": 2}, delay=0.2).job_id
    dropped = queue.enqueue("work", {"n": 3}).job_id
    with cluster.owner(settings.keys.ready) as owner:
        owner.hset(settings.keys.job("older"), mapping={
            "id": "older", "type": "work", "payload": "{}", "status": "queued", "attempt": 0,
            "max_attempts": 5, "lease": 0, "created_at": 1, "schema_version": 1})
        owner.lpush(settings.keys.ready, "older")
        assert owner.hlen(settings.keys.queued) == 3
    assert queue.enqueue("work", {"n": 1}, idempotency_key="once").job_id == fresh
    assert (queue.get(fresh).status, queue.get(delayed).status) == ("queued", "scheduled")
    assert queue.cancel(dropped) == "queued"
    assert queue.get(dropped).status == "cancelled"
    wait_until(lambda: queue.stats().due == 1, timeout_s=5, message="the delayed job to be due")
    claimed = scripts.run(client, claim_op(settings, WorkerSettings(), worker_id="w1", max_jobs=10))
    assert sorted(job.id for job in claimed.jobs) == sorted([fresh, delayed, "older"])
    assert all(queue.get(job_id).status == "processing" for job_id in (fresh, delayed, "older"))
    check_invariants(cluster, settings)
    client.close()


def test_expand_queued_over_the_cluster(
        cluster: Cluster, queue_pair: tuple[QueueSettings, QueueSettings]) -> None:
    """``antre expand-queued`` through a redis+cluster:// URL: refused while a worker of this
    version is registered, then the fields become job Hashes in the queue's slot."""
    client = connection.connect(cluster.url)
    settings = queue_pair[0]
    queue = Queue(client, settings=settings)
    register_worker(client, settings)
    ids = [queue.enqueue("work", {"n": n}, delay=60 if n else None).job_id for n in range(2)]
    command = ["expand-queued", "--redis-url", cluster.url, "--queue", settings.name,
               "--prefix", settings.prefix]
    assert main(command) == EXIT_UNAVAILABLE
    with cluster.owner(settings.keys.ready) as owner:
        assert owner.hlen(settings.keys.queued) == 2
        owner.delete(settings.keys.workers)  # the worker stopped
    assert main(command) == 0
    with cluster.owner(settings.keys.ready) as owner:
        assert owner.exists(settings.keys.queued) == 0
        assert [owner.hget(settings.keys.job(job_id), "status") for job_id in ids] == [
            "queued", "scheduled"]
    check_invariants(cluster, settings)
    client.close()


async def test_worker_drains_jobs_over_the_cluster(
        cluster: Cluster, queue_pair: tuple[QueueSettings, QueueSettings]) -> None:
    settings = queue_pair[1]
    total = 300
    producer = Queue(connection.connect(cluster.url), settings=settings)
    ids = [r.job_id for r in producer.enqueue_many(("noop", {"n": n}) for n in range(total))]

    seen: list[int] = []
    registry = HandlerRegistry()

    @registry.handler("noop")
    async def noop(job: Job) -> None:
        seen.append(job.payload["n"])

    worker = Worker(connection.connect_async(cluster.url), settings,
                    WorkerSettings(concurrency=8, visibility_timeout_s=5.0, reaper_interval_s=0.5),
                    registry)
    running = asyncio.create_task(worker.run())

    def drained() -> bool:
        assert not running.done(), f"worker stopped: {running}"
        return producer.stats().counters.get("done", 0) >= total

    try:
        await eventually(drained, timeout_s=60, interval_s=0.05,
                         message=f"the worker to finish all {total} jobs")
    finally:
        worker.stop()
        await asyncio.wait_for(running, timeout=15)
        await worker.redis.aclose()
    assert sorted(seen) == list(range(total)), "every job ran exactly once"
    assert worker.succeeded == total
    assert {producer.get(job_id).status for job_id in ids} == {"done"}
    check_invariants(cluster, settings)
    producer.close()


async def test_durable_writes_are_refused_on_a_cluster_at_once(cluster: Cluster) -> None:
    """WAIT must follow the write on its own connection; a cluster pipeline does not promise
    that, so a durable queue or worker on a cluster is a clear error, not a silent no-op."""
    durable = QueueSettings(name="dq", durable_replicas=1)
    client = connection.connect(cluster.url)
    aclient = connection.connect_async(cluster.url)
    try:
        with pytest.raises(antre.InvalidArgument, match="durable_replicas: got 1 with a Redis "
                                                        "Cluster URL"):
            Queue(client, settings=durable)
        with pytest.raises(antre.InvalidArgument, match="durable_replicas"):
            Worker(aclient, durable, WorkerSettings(), HandlerRegistry())
    finally:
        client.close()
        await aclient.aclose()


def test_a_durable_api_on_a_cluster_is_refused_at_start(cluster: Cluster) -> None:
    """README: "a durable queue on a redis+cluster:// URL is refused at start". ``antre api``
    too: one line and exit 2 before it listens, not a 500 for every request it serves."""
    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "antre", "api", "--port", str(port), "--redis-url", cluster.url,
         "--queue", "dq"],
        env={**child_env(), "ANTRE_DURABLE_REPLICAS": "1", "ANTRE_API_TOKEN": "t" * 32},
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        try:
            out, err = proc.communicate(timeout=20)
        except subprocess.TimeoutExpired:
            answer = ""
            with contextlib.suppress(OSError), socket.create_connection(
                    ("127.0.0.1", port), timeout=5) as sock:
                sock.sendall(b"POST /v1/queues/dq/jobs HTTP/1.0\r\nAuthorization: Bearer "
                             + b"t" * 32 + b"\r\nContent-Type: "
                             b"application/json\r\nContent-Length: 12\r\n\r\n"
                             b'{"type":"t"}')
                answer = sock.recv(200).decode(errors="replace")
            raise AssertionError("antre api kept serving a durable queue on a cluster; an "
                                 f"enqueue got: {answer.splitlines()[:1]}") from None
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert "Traceback" not in err, err
    assert proc.returncode == 2 and err.count("\n") == 1, err
    assert err.startswith("antre api: durable_replicas: got 1 with a Redis Cluster URL"), err
    assert not out


async def worker_warns(url: str, settings: QueueSettings,
                       caplog: pytest.LogCaptureFixture) -> bool:
    """Whether a worker starting on ``settings`` logged the eviction warning; it checks before
    it registers, so once registered it has said what it would."""
    caplog.clear()
    producer = Queue(connection.connect(url), settings=settings)
    worker = Worker(connection.connect_async(url), settings, WorkerSettings(), HandlerRegistry())
    running = asyncio.create_task(worker.run())
    try:
        await eventually(lambda: running.done() or producer.workers(), timeout_s=10,
                         message="the worker to register")
    finally:
        worker.stop()
        await asyncio.wait_for(running, timeout=15)
        await worker.redis.aclose()
        producer.close()
    return any("maxmemory-policy" in record.getMessage() for record in caplog.records)


async def eviction_warnings(url: str, settings: QueueSettings, capsys: pytest.CaptureFixture[str],
                            caplog: pytest.LogCaptureFixture) -> dict[str, bool]:
    """Whether each of antre's eviction checks warns for the queue of ``settings``."""
    warns: dict[str, bool] = {}
    queue = Queue(connection.connect(url), settings=settings)
    try:
        warns["Queue"] = queue.eviction_policy_warning() is not None
        warns["read_snapshot"] = read_snapshot(queue, sample_gap_s=0).eviction_warning is not None
    finally:
        queue.close()
    aqueue = antre.AsyncQueue(connection.connect_async(url), settings=settings)
    try:
        warns["AsyncQueue"] = await aqueue.eviction_policy_warning() is not None
        warns["read_snapshot_async"] = (await read_snapshot_async(aqueue)).eviction_warning is not None
    finally:
        await aqueue.close()
    capsys.readouterr()
    assert main(["stats", "--redis-url", url, "--queue", settings.name]) == 0
    warns["antre stats"] = "maxmemory-policy" in capsys.readouterr().err
    warns["Worker"] = await worker_warns(url, settings, caplog)
    return warns


async def test_the_eviction_check_reads_the_node_holding_the_queue(
        cluster: Cluster, queue_pair: tuple[QueueSettings, QueueSettings],
        capsys: pytest.CaptureFixture[str], caplog: pytest.LogCaptureFixture) -> None:
    """Every key of a queue carries its hash tag, so one primary holds all of it and its
    maxmemory-policy alone decides. With allkeys-lru on each node in turn, each check warns for
    the queue on that node and for no other. Before, INFO went to redis-py's default node (the
    first primary it knows), whose policy decided for every queue: of two queues on different
    nodes, one at least read as safe on an evicting node, and as unsafe on a safe one."""
    caplog.set_level(logging.WARNING, logger="antre")
    owners = {settings.name: cluster.owner_port(settings.keys.ready) for settings in queue_pair}
    wrong = []
    for node in cluster.nodes:
        with cluster.evicting(node.port):
            for settings in queue_pair:
                expected = owners[settings.name] == node.port
                for check, warned in (await eviction_warnings(
                        cluster.url, settings, capsys, caplog)).items():
                    if warned != expected:
                        wrong.append(f"allkeys-lru on node {node.port}, queue {settings.name!r} "
                                     f"on node {owners[settings.name]}: {check} "
                                     f"{'warned' if warned else 'did not warn'}")
    assert wrong == []
