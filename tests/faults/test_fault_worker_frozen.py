"""SIGSTOP a worker past its lease, let another finish the job, then SIGCONT the first.

Covers: the reaper requeues the frozen worker's expired lease; a second worker runs and acks the
job; the thawed worker's result is refused (it logs ``lease_lost``, whether its heartbeat or its
ack finds the lease gone first, and the record keeps the second worker's ack); the idempotent
handler's effect happens once although the handler ran twice.
"""

from __future__ import annotations

import signal

import redis
from antre import Queue, QueueSettings
from fault_support import SpawnWorker, check_invariants, counter, effect_count, runs
from redis_servers import RedisServer, wait_until


def test_thawed_worker_cannot_settle_a_job_finished_elsewhere(
        spawn_worker: SpawnWorker, fault_redis: RedisServer, fault_client: redis.Redis,
        queue_settings: QueueSettings) -> None:
    queue = Queue.from_url(fault_redis.url, settings=queue_settings)
    a = spawn_worker("a")
    a_id = a.worker_id()
    # a's run sleeps 0.5 s, well inside the freeze below: on SIGCONT its handler returns at once.
    job_id = queue.enqueue("record", {"sleep_s": 0.5, "sleep_in": ["a"]},
                           idempotency_key="frozen").job_id
    wait_until(lambda: runs(fault_client, job_id) == 1, message="worker a to start the job")
    a.signal(signal.SIGSTOP)
    try:
        b = spawn_worker("b")
        b_id = b.worker_id()
        wait_until(lambda: queue.get(job_id).status == "done", timeout_s=15,
                   message="job requeued from frozen a and done on b")
        done = queue.get(job_id)
        # Not "a:2": the claim a's idle wait sent before the freeze must not lease a the job its
        # own expired lease just returned to the queue (claim.lua refuses a silent worker).
        assert fault_client.get("effects:frozen") == "b:2", [
            (e.event, e.attempt, e.worker) for e in done.history]
    finally:
        a.signal(signal.SIGCONT)

    wait_until(lambda: counter(fault_client, f"finishes:{job_id}") == 2,
               message="a's handler to return after SIGCONT")
    wait_until(lambda: a.events("lease_lost", job_id), message="a to log lease_lost")
    [lost] = a.events("lease_lost", job_id)
    assert lost["worker_id"] == a_id and lost["attempt"] == 1
    assert not a.events("acked", job_id)

    info = queue.get(job_id)
    assert info.status == "done" and info.attempt == 2
    assert info.history == done.history, "a's late settle must change nothing"
    acks = [e for e in info.history if e.event == "acked"]
    assert [(e.worker, e.attempt) for e in acks] == [(b_id, 2)]
    assert [e.event for e in info.history if e.event != "extended"] == [
        "enqueued", "claimed", "lease_expired", "claimed", "acked"]
    assert runs(fault_client, job_id) == 2, "the handler ran twice ..."
    assert effect_count(fault_client, "frozen") == 1, "... and its effect happened once"
    assert fault_client.get("effects:frozen") == "b:2"
    assert a.alive() and b.alive()
    check_invariants(fault_client, queue_settings)
