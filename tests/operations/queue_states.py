"""Queue states built on purpose, through the real protocol scripts, for the inspection tests
and the API tests: a stuck lease, an overdue retry, a dead-letter burst, a held resource lock,
a prefetched job handed back beside one released at shutdown.

Where a state needs time to pass (a lease that expired a minute ago), the helper claims or
fails the job for real and then moves its deadline into the past in the ZSET, which is what the
passing of that time would have left behind; no test sleeps.
"""

from __future__ import annotations

from collections.abc import Sequence

from antre import Queue, WorkerSettings
from antre.protocol import scripts
from antre.protocol.claim import claim_op
from antre.protocol.fail import fail_op
from antre.protocol.release import release_op
from antre.settling import HAND_BACK_REASON

WORKER = WorkerSettings(visibility_timeout_s=30)


def server_ms(queue: Queue) -> int:
    seconds, micros = queue.redis.time()
    return int(seconds) * 1000 + int(micros) // 1000


def claim(queue: Queue, n: int = 1, *, worker_id: str = "test-worker") -> list[tuple[str, int]]:
    """Leases up to ``n`` ready jobs; returns (job id, lease token) pairs."""
    result = scripts.run(queue.redis, claim_op(queue.settings, WORKER, worker_id=worker_id,
                                               max_jobs=n))
    return [(job.id, job.lease) for job in result.jobs]


def stuck_lease(queue: Queue, *, expired_s: float = 60.0, job_type: str = "resize",
                resource_key: str | None = None, worker_id: str = "dead-worker") -> str:
    """A job leased by a worker that vanished ``expired_s`` seconds after its deadline."""
    job_id = queue.enqueue(job_type, {"n": 1}, resource_key=resource_key).job_id
    [(claimed, _token)] = claim(queue, 1, worker_id=worker_id)
    assert claimed == job_id
    queue.redis.zadd(queue.keys.processing, {job_id: server_ms(queue) - int(expired_s * 1000)})
    return job_id


def fail(queue: Queue, lease: tuple[str, int], *, error: str, retry_delay_ms: int | None) -> str:
    result = scripts.run(queue.redis, fail_op(queue.settings, lease, error=error,
                                              retry_delay_ms=retry_delay_ms,
                                              worker_id="test-worker"))
    return result.outcome


def overdue_retry(queue: Queue, *, overdue_s: float = 120.0, job_type: str = "charge") -> str:
    """A failed job whose retry fell due ``overdue_s`` seconds ago and was never promoted."""
    job_id = queue.enqueue(job_type, {}).job_id
    [lease] = claim(queue, 1)
    assert fail(queue, lease, error="TimeoutError: upstream", retry_delay_ms=1000) == "retrying"
    queue.redis.zadd(queue.keys.retry, {job_id: server_ms(queue) - int(overdue_s * 1000)})
    return job_id


def dead_letters(queue: Queue, errors_by_count: Sequence[tuple[str, int]], *,
                 job_type: str = "send_email") -> list[str]:
    """Dead-letters jobs: for each (error text, count) that many jobs fail permanently."""
    ids = []
    for error, count in errors_by_count:
        for result in queue.enqueue_many([(job_type, {"i": i}) for i in range(count)]):
            ids.append(result.job_id)
        for lease in claim(queue, count):
            assert fail(queue, lease, error=error, retry_delay_ms=None) == "dead"
    return ids


def register_worker(queue: Queue, worker_id: str = "w-1", *, pod: str = "pod-1",
                    concurrency: int = 4) -> None:
    """A live worker registry entry, written by the heartbeat script as a worker would."""
    import json

    from antre.protocol.extend_lease import extend_lease_op

    entry = {"worker_id": worker_id, "pod": pod, "host": "h", "pid": 1, "in_flight": 0,
             "concurrency": concurrency, "started_at_ms": server_ms(queue) - 60_000}
    scripts.run(queue.redis, extend_lease_op(queue.settings, [], lease_ms=30_000, worker_id=worker_id,
                                       registry_entry_json=json.dumps(entry),
                                       registry_ttl_ms=30_000))


def handed_back_and_released(queue: Queue, *, worker_id: str = "test-worker") -> tuple[str, str]:
    """Two jobs claimed by one worker: the first handed back unstarted (the work outgrew its
    buffer), the second released at its shutdown, as the worker does. Returns their ids."""
    handed, released = (result.job_id for result in queue.enqueue_many([("t", 1), ("t", 2)]))
    leases = dict(claim(queue, 2, worker_id=worker_id))
    assert scripts.run(queue.redis, release_op(
        queue.settings, [(handed, leases[handed])], worker_id=worker_id, reason=HAND_BACK_REASON,
        unstarted={handed}, event="handed_back")) == ["handed_back"]
    assert scripts.run(queue.redis, release_op(
        queue.settings, [(released, leases[released])], worker_id=worker_id,
        reason="worker shutting down")) == ["released"]
    return handed, released
