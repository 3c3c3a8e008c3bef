"""A job that SIGKILLs whichever worker runs it.

Covers: each lost lease counts as an attempt, so after max_attempts the job is dead with a
last_error about the lost lease instead of looping through workers forever; the final expiry is
handled by ``antre reaper --once`` (the CronJob backstop when no worker is up); a fresh worker
afterwards serves other jobs and never runs the dead one again.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys

import redis
from antre import Queue, QueueSettings
from fault_support import QUEUE, SpawnWorker, check_invariants, effect_count, runs
from redis_servers import RedisServer, child_env, wait_until

MAX_ATTEMPTS = 3


def reaper_once(url: str) -> dict[str, int]:
    done = subprocess.run([sys.executable, "-m", "antre", "reaper", "--once", "--redis-url", url,
                           "--queue", QUEUE], env=child_env(), capture_output=True, text=True,
                          timeout=30, check=True)
    return json.loads(done.stdout.strip().splitlines()[-1])  # type: ignore[no-any-return]


def test_job_that_kills_its_worker_ends_dead_after_max_attempts(
        spawn_worker: SpawnWorker, fault_redis: RedisServer, fault_client: redis.Redis,
        queue_settings: QueueSettings) -> None:
    queue = Queue.from_url(fault_redis.url, settings=queue_settings)
    job_id = queue.enqueue("kill_worker", {}, max_attempts=MAX_ATTEMPTS).job_id

    # Like a Deployment restarting crashed pods: a new worker each time one dies. Each one's
    # reaper requeues the previous worker's expired lease, then it claims the job and dies.
    worker_ids = []
    for attempt in range(1, MAX_ATTEMPTS + 1):
        worker = spawn_worker(f"w{attempt}")
        worker_ids.append(worker.worker_id())
        assert worker.process.wait(timeout=20) == -signal.SIGKILL
        assert runs(fault_client, job_id) == attempt

    # No worker is left: the CronJob's pass dead-letters the job once the last lease expires.
    totals = wait_until(lambda: (t := reaper_once(fault_redis.url))["dead"] == 1 and t,
                        timeout_s=15, interval_s=0.1, message="reaper --once to dead-letter the job")
    assert totals["requeued"] == 0

    info = queue.get(job_id)
    assert info.status == "dead"
    assert info.attempt == MAX_ATTEMPTS
    assert info.last_error is not None
    assert f"lease expired during attempt {MAX_ATTEMPTS}" in info.last_error
    assert "lost or frozen past its lease" in info.last_error
    assert [(e.event, e.attempt) for e in info.history if e.event != "extended"] == [
        ("enqueued", 0), ("claimed", 1), ("lease_expired", 1), ("claimed", 2),
        ("lease_expired", 2), ("claimed", 3), ("dead", 3)]
    assert [e.worker for e in info.history if e.event == "claimed"] == worker_ids
    assert fault_client.zrange(queue_settings.keys.dead, 0, -1) == [job_id]
    assert queue.stats().dead == 1

    # The queue goes on: a new worker serves the next job and leaves the dead one alone.
    survivor = spawn_worker("survivor")
    sentinel = queue.enqueue("record", {}, idempotency_key="after-poison").job_id
    wait_until(lambda: queue.get(sentinel).status == "done", message="a later job to be served")
    assert effect_count(fault_client, "after-poison") == 1
    assert runs(fault_client, job_id) == MAX_ATTEMPTS
    assert survivor.alive(), f"survivor died: {os.linesep.join(map(str, survivor.log_lines()))}"
    check_invariants(fault_client, queue_settings)
