"""Redis restarted under load: a producer enqueues continuously while two workers drain.

Covers two durable set-ups: a clean shutdown with the append-only file on, and a kill -9 with
``appendfsync always``. No acknowledged enqueue (a job id the producer got back) is lost: each is
eventually done, its idempotent effect performed once. The workers ride out the outage (they log
it and back off instead of crashing), reconnect by themselves and keep finishing jobs after Redis
is back. An ack retried after its reply was lost in the crash is not misreported as lease lost.
"""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest
import redis
from antre import Queue, QueueSettings, RedisUnavailable, WorkerSettings, connection
from antre.protocol import scripts
from antre.protocol.ack import ack_op
from antre.protocol.claim import claim_op
from fault_support import SpawnWorker, WorkerProcess, check_invariants, effect_count
from invariants import read_record, read_records
from redis_servers import RedisServer, wait_until


class Producer(threading.Thread):
    """Enqueues ``record`` jobs one by one with idempotency keys ``p-<n>``; a failed call is
    retried with the same key, so a reply lost in the outage creates no duplicate."""

    def __init__(self, url: str, settings: QueueSettings) -> None:
        super().__init__(name="producer", daemon=True)
        self.queue = Queue(connection.connect(url, socket_timeout=2.0, socket_connect_timeout=1.0),
                           settings=settings)
        self.acknowledged: list[str] = []
        self.failed_calls = 0
        self.error: BaseException | None = None
        self.halt = threading.Event()

    def run(self) -> None:
        try:
            while not self.halt.is_set():
                n = len(self.acknowledged)
                try:
                    result = self.queue.enqueue("record", {"n": n}, idempotency_key=f"p-{n}")
                except RedisUnavailable:
                    self.failed_calls += 1
                    time.sleep(0.02)  # the retry's pace while Redis is down
                    continue
                self.acknowledged.append(result.job_id)
                time.sleep(0.004)  # the load's pace: at most 250 enqueues a second
        except BaseException as exc:  # surfaced by the test, not lost in a thread
            self.error = exc

    def stop(self) -> None:
        self.halt.set()
        self.join(timeout=10)
        assert not self.is_alive(), "producer did not stop"
        assert self.error is None, f"producer crashed: {self.error!r}"


OUTAGE_MESSAGES = {"redis call failed; retrying with backoff", "heartbeat failed; retrying",
                   "reaper pass failed; retrying"}


def outage_logged(worker: WorkerProcess) -> bool:
    return any(entry.get("msg") in OUTAGE_MESSAGES for entry in worker.log_lines())


def statuses(client: redis.Redis, settings: QueueSettings, job_ids: list[str]) -> list[Any]:
    return [record.get("status") for record in read_records(client, settings, job_ids)]


@pytest.mark.parametrize(("fault_redis", "crash"), [
    pytest.param({"appendonly": True, "appendfsync": "everysec"}, False, id="clean-shutdown-aof"),
    pytest.param({"appendonly": True, "appendfsync": "always"}, True, id="kill9-fsync-always"),
], indirect=["fault_redis"])
def test_no_acknowledged_enqueue_lost_and_workers_reconnect(
        crash: bool, spawn_worker: SpawnWorker, fault_redis: RedisServer,
        queue_settings: QueueSettings) -> None:
    workers = [spawn_worker(name, concurrency=4, visibility_timeout_s=2.0) for name in ("a", "b")]
    producer = Producer(fault_redis.url, queue_settings)
    producer.start()
    client = redis.Redis.from_url(fault_redis.url, decode_responses=True)
    try:
        wait_until(lambda: len(producer.acknowledged) >= 60 and statuses(
            client, queue_settings, producer.acknowledged[:30]).count("done") == 30,
            message="producer and workers under way")

        if crash:
            fault_redis.kill()
        else:
            fault_redis.shutdown()
        # Stay down until the workers have noticed: they must ride out a real outage.
        wait_until(lambda: any(outage_logged(worker) for worker in workers),
                   message="a worker to notice the outage")
        fault_redis.start()
        client = redis.Redis.from_url(fault_redis.url, decode_responses=True)
        before_restart = len(producer.acknowledged)

        wait_until(lambda: len(producer.acknowledged) >= before_restart + 60, timeout_s=20,
                   message="the producer to enqueue again after the restart")
        producer.stop()
        acknowledged = producer.acknowledged

        wait_until(lambda: set(statuses(client, queue_settings, acknowledged)) == {"done"},
                   timeout_s=30, message="every acknowledged job done")
        for n in range(len(acknowledged)):
            assert effect_count(client, f"p-{n}") == 1, f"job p-{n}: effect not exactly once"
        assert client.get(f"effects:p-{len(acknowledged)}") is None, "no job beyond the acknowledged"

        for worker in workers:
            assert worker.alive(), f"worker {worker.name} died in the outage"
        # An ack applied just before the crash, retried after it, is not misreported as lost.
        queue = Queue(client, settings=queue_settings)
        for worker in workers:
            worker_id = worker.worker_id()
            for lost in worker.events("lease_lost"):
                history = queue.get(lost["job_id"]).history
                assert not [e for e in history if e.event == "acked" and e.worker == worker_id
                            and e.attempt == lost["attempt"]], f"acked, yet logged as lost: {lost}"
        # Jobs enqueued after the restart were done by these same two processes.
        assert len(acknowledged) > before_restart
        check_invariants(client, queue_settings)
    finally:
        producer.halt.set()
        client.close()


def test_ack_retried_after_its_reply_was_lost_reports_held(
        fault_client: redis.Redis, queue_settings: QueueSettings) -> None:
    """The deterministic core of the above: the same ack sent twice (first reply lost) reports
    the lease held both times, while a stale lease's ack is still refused."""
    queue = Queue(fault_client, settings=queue_settings)
    job_id = queue.enqueue("record", {}).job_id
    [claimed] = scripts.run(fault_client, claim_op(
        queue_settings, WorkerSettings(), worker_id="w", max_jobs=1)).jobs
    lease = (job_id, claimed.lease)
    assert scripts.run(fault_client, ack_op(queue_settings, [lease], worker_id="w")).held == [True]
    before = read_record(fault_client, queue_settings, job_id)
    assert scripts.run(fault_client, ack_op(queue_settings, [lease], worker_id="w")).held == [True]
    stale = (job_id, claimed.lease - 1)
    assert scripts.run(fault_client, ack_op(queue_settings, [stale], worker_id="w")).held == [False]
    assert read_record(fault_client, queue_settings, job_id) == before, "retries change nothing"
    assert queue.stats().counters["done"] == 1
    check_invariants(fault_client, queue_settings)
