"""A failover under load: producers enqueue and two workers drain through ``redis+sentinel://``
while the primary is killed (``kill -9``) and Sentinel promotes a replica; twice in a row, first
with Redis's asynchronous replication, then with the durable option on every replica
(``durable_replicas=2``: Sentinel's pick of the most up-to-date replica works from offsets it
last saw, so with ``1`` a write only the other replica confirmed was lost in a loaded run).

The primary dies with writes its replicas never got: its replication link is cut a moment
before the kill (the replicas are disconnected and refused when they try again), as when a
network fault isolates a primary from its replicas just before it fails. Figures printed per
phase: acknowledged enqueues, how many were lost, unconfirmed answers producers retried, jobs
lost or stuck afterwards, and the time from the kill until producers and workers make progress
again.

Asserted: with the durable option no acknowledged enqueue is lost, and the window was real
(producers did get unconfirmed answers in it); in both phases every job that survived is done
afterwards, each effect performed once, nothing stuck, the queue's structures consistent.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass
from typing import Any

import redis
from antre import NotReplicated, Queue, QueueSettings, RedisUnavailable, connection
from fault_support import SpawnWorker, WorkerProcess, check_invariants, effect_count
from redis_sentinels import SentinelGroup
from redis_servers import wait_until

#: How long the primary keeps acknowledging writes after its replicas are cut off.
CUT_OFF_S = 0.5
#: The durable phase's wait for confirmations: several unconfirmed answers fit in the cut-off.
DURABLE_TIMEOUT_S = 0.2
#: The group's replicas, all of which the durable phase waits for.
REPLICAS = 2
#: Acknowledged enqueues before the fault, and after the failover before producers stop.
BEFORE, AFTER = 300, 300


class Producer(threading.Thread):
    """Enqueues ``record`` jobs with idempotency keys ``<tag>-<n>``; a call that fails, or is
    not confirmed by the replicas, is retried with the same key."""

    def __init__(self, url: str, settings: QueueSettings, tag: str) -> None:
        super().__init__(name=f"producer-{tag}", daemon=True)
        self.queue = Queue(connection.connect(url, socket_timeout=2.0, socket_connect_timeout=1.0),
                           settings=settings)
        self.tag = tag
        #: (idempotency key, wall time of the acknowledgement)
        self.acknowledged: list[tuple[str, float]] = []
        self.unconfirmed = 0
        self.error: BaseException | None = None
        self.halt = threading.Event()

    def run(self) -> None:
        try:
            while not self.halt.is_set():
                key = f"{self.tag}-{len(self.acknowledged)}"
                try:
                    self.queue.enqueue("record", {}, idempotency_key=key)
                except NotReplicated:
                    self.unconfirmed += 1
                    continue
                except RedisUnavailable:
                    time.sleep(0.02)  # the retry's pace while no primary answers
                    continue
                self.acknowledged.append((key, time.time()))
        except BaseException as exc:  # surfaced by the test, not lost in a thread
            self.error = exc

    def stop(self) -> None:
        self.halt.set()
        self.join(timeout=15)
        self.queue.close()
        assert not self.is_alive(), "producer did not stop"
        assert self.error is None, f"producer crashed: {self.error!r}"


@dataclass
class Figures:
    phase: str
    acknowledged: int
    lost: int
    unconfirmed: int
    left_over: int
    enqueue_resumed_s: float
    work_resumed_s: float
    promoted_s: float

    def line(self) -> str:
        return (f"[failover {self.phase}] acknowledged enqueues {self.acknowledged}, lost "
                f"{self.lost}, unconfirmed answers retried {self.unconfirmed}; jobs lost or "
                f"stuck afterwards {self.left_over}; replica promoted {self.promoted_s:.2f} s "
                f"after the kill, enqueues resumed after {self.enqueue_resumed_s:.2f} s, "
                f"acks after {self.work_resumed_s:.2f} s")


def cut_off_replicas(group: SentinelGroup) -> None:
    """The primary stops feeding its replicas: they are disconnected, and refused (PSYNC and
    SYNC denied to the default user, on the primary only) when they reconnect."""
    with group.primary_client() as primary:
        primary.acl_setuser("default", enabled=True, reset=False, commands=["-psync", "-sync"])
        primary.client_kill_filter(_type="replica")


def first_after(times: list[float], moment: float) -> float:
    later = [t for t in times if t > moment]
    assert later, "nothing happened after the kill"
    return min(later) - moment


def acked_times(workers: list[WorkerProcess]) -> list[float]:
    return [float(entry["ts"]) for worker in workers for entry in worker.log_lines()
            if entry.get("event") == "acked"]


def drained(group: SentinelGroup, settings: QueueSettings) -> bool:
    with group.primary_client() as primary:
        depth = Queue(primary, settings=settings).stats()
    return depth.ready + depth.processing + depth.scheduled == 0


def total(producers: list[Producer]) -> int:
    return sum(len(producer.acknowledged) for producer in producers)


def run_phase(group: SentinelGroup, spawn_worker: SpawnWorker, effects: redis.Redis, *,
              durable: bool) -> Figures:
    phase = "durable" if durable else "async"
    replicas = REPLICAS if durable else 0
    settings = QueueSettings(name=f"load-{phase}", durable_replicas=replicas,
                             durable_timeout_s=DURABLE_TIMEOUT_S)
    env = {"ANTRE_DURABLE_REPLICAS": str(replicas),
           "ANTRE_DURABLE_TIMEOUT": str(DURABLE_TIMEOUT_S)} if durable else {}
    workers = [spawn_worker(f"{phase}{i}", queue=settings.name, concurrency=8,
                            visibility_timeout_s=3.0, extra_env=env) for i in range(2)]
    producers = [Producer(group.url(), settings, f"{phase}{i}") for i in range(3)]
    for producer in producers:
        producer.start()
    try:
        wait_until(lambda: total(producers) >= BEFORE and acked_times(workers), timeout_s=30,
                   message="load before the fault")
        cut_off_replicas(group)
        time.sleep(CUT_OFF_S)
        failover = group.fail_over()
        killed_wall = time.time() - (time.monotonic() - failover.killed_at)
        after_kill = total(producers)
        wait_until(lambda: total(producers) >= after_kill + AFTER, timeout_s=30,
                   message="enqueues after the failover")
    finally:
        for producer in producers:
            producer.stop()
    wait_until(lambda: drained(group, settings), timeout_s=60, message="the queue drained")

    keys = [key for producer in producers for key, _ in producer.acknowledged]
    pipe = effects.pipeline(transaction=False)
    for key in keys:
        pipe.exists(f"effects:{key}")
    lost = [key for key, done in zip(keys, pipe.execute(), strict=True) if not done]
    assert all(effect_count(effects, key) <= 1 for key in keys[:: max(len(keys) // 200, 1)])
    with group.primary_client() as primary:
        depth = Queue(primary, settings=settings).stats()
        check_invariants(primary, settings)
    return Figures(
        phase=phase, acknowledged=len(keys), lost=len(lost),
        unconfirmed=sum(producer.unconfirmed for producer in producers),
        left_over=depth.ready + depth.processing + depth.scheduled + depth.dead,
        enqueue_resumed_s=first_after(
            [at for producer in producers for _, at in producer.acknowledged], killed_wall),
        work_resumed_s=first_after(acked_times(workers), killed_wall),
        promoted_s=failover.promoted_after_s)


def test_failover_under_load_loses_no_durable_enqueue(
        sentinels: SentinelGroup, spawn_worker: SpawnWorker, redis_client: Any,
        figures: list[str]) -> None:
    asynchronous = run_phase(sentinels, spawn_worker, redis_client, durable=False)
    durable = run_phase(sentinels, spawn_worker, redis_client, durable=True)
    figures += [asynchronous.line(), durable.line()]
    assert durable.lost == 0
    assert durable.unconfirmed > 0, "the replicas never lagged: the durable phase proved nothing"
    assert asynchronous.left_over == durable.left_over == 0
