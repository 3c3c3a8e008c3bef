"""Reading a queue's :class:`~antre.findings.Snapshot` from Redis: the I/O side of ``antre
inspect``, ``doctor`` and ``top``.

Read-only commands: the depth script twice, ZRANGEBYSCORE on the processing and retry sets,
LRANGE on the dead list, SCAN over the lock prefix, the worker registry. :mod:`antre.findings`
turns the snapshot into findings and text. Key names come from :class:`antre.keys.QueueKeys`
through the queue.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any, Final

import redis

from antre import findings
from antre.client import Queue
from antre.findings import Snapshot, Thresholds
from antre.protocol.depth import Depth
from antre.protocol.workers import WorkerEntry

#: Entries read per section: enough for one screen and for grouping, bounded for big queues.
READ_LIMIT: Final = 50
DEAD_READ_LIMIT: Final = 500
LOCK_SCAN_LIMIT: Final = 1000
#: Shown as the holder of a key under the lock prefix that is not a string (not antre's).
NOT_A_LOCK: Final = "(not a lock: wrong key type)"


def read_snapshot(queue: Queue, *, sample_gap_s: float = 1.0, thresholds: Thresholds | None = None,
                  before: Depth | None = None, sleep: Callable[[float], None] = time.sleep) -> Snapshot:
    """Reads the queue's state. The trend compares ``before`` (or a first reading taken
    ``sample_gap_s`` earlier) with the current depth."""
    thresholds = thresholds or Thresholds()
    if before is None:
        before = queue.stats()
        if sample_gap_s > 0:
            sleep(sample_gap_s)
    after = queue.stats()
    redis_client, k, now = queue.redis, queue.keys, after.now_ms

    expired = redis_client.zrangebyscore(k.processing, "-inf", now, start=0, num=READ_LIMIT,
                                         withscores=True)
    overdue_cutoff = now - int(thresholds.overdue_after_s * 1000)
    overdue_total = int(redis_client.zcount(k.retry, "-inf", overdue_cutoff))
    overdue = redis_client.zrangebyscore(k.retry, "-inf", overdue_cutoff, start=0, num=READ_LIMIT,
                                         withscores=True) if overdue_total else []
    dead_ids = redis_client.lrange(k.dead, 0, DEAD_READ_LIMIT - 1)
    lock_keys = []
    for key in redis_client.scan_iter(match=k.lock_prefix + "*", count=1000):
        lock_keys.append(key)
        if len(lock_keys) >= LOCK_SCAN_LIMIT:
            break

    pipe = redis_client.pipeline(transaction=False)
    # raise_on_error=False: a key of the wrong type under the lock prefix is reported, not fatal.
    for job_id, _deadline in expired:
        pipe.hmget(k.job(job_id), "type", "worker", "attempt")
    for job_id, _due in overdue:
        pipe.hmget(k.job(job_id), "type", "attempt", "last_error")
    for job_id in dead_ids:
        pipe.hmget(k.job(job_id), "type", "last_error", "died_at")
    for key in lock_keys:
        pipe.get(key)
        pipe.pttl(key)
    replies = iter(pipe.execute(raise_on_error=False))

    leases = []
    for job_id, deadline in expired:
        job_type, worker, attempt = next(replies)
        leases.append(findings.ExpiredLease(
            job_id=job_id, job_type=job_type or "?", worker=worker or "",
            attempt=_int(attempt), expired_for_s=max(now - deadline, 0) / 1000))
    retries = []
    for job_id, due in overdue:
        job_type, attempt, last_error = next(replies)
        retries.append(findings.OverdueRetry(
            job_id=job_id, job_type=job_type or "?", attempt=_int(attempt),
            overdue_s=max(now - due, 0) / 1000, last_error=last_error or ""))
    dead = []
    for job_id in dead_ids:
        job_type, last_error, died_at = next(replies)
        dead.append(findings.DeadJob(job_id=job_id, job_type=job_type or "?",
                                       last_error=last_error or "", died_at_ms=_int(died_at)))
    holders: list[tuple[str, str, float | None]] = []
    for key in lock_keys:
        value, pttl = next(replies), _int(next(replies), -2)
        if value is None or pttl == -2:  # expired between SCAN and GET
            continue
        holder = NOT_A_LOCK if isinstance(value, Exception) else str(value).split(":", 1)[0]
        holders.append((key[len(k.lock_prefix):], holder, None if pttl < 0 else pttl / 1000))
    processing = []
    if holders:
        pipe = redis_client.pipeline(transaction=False)
        for _resource, job_id, _ttl in holders:
            pipe.zscore(k.processing, job_id)
        processing = pipe.execute()
    locks = [findings.ResourceLock(resource=resource, job_id=job_id, ttl_s=ttl,
                                     holder_processing=score is not None)
             for (resource, job_id, ttl), score in zip(holders, processing, strict=True)]

    workers, bad_workers = _read_workers(queue, now)
    try:
        warning = queue.eviction_policy_warning()
    except redis.ResponseError:  # INFO may be renamed or disabled on managed Redis
        warning = None
    return Snapshot(queue=queue.name, before=before, after=after, expired_leases=leases,
                    overdue_retries=retries, overdue_total=overdue_total, dead_jobs=dead,
                    locks=sorted(locks, key=lambda lock: lock.resource),
                    workers=sorted(workers, key=lambda w: w.worker_id),
                    bad_worker_entries=bad_workers, eviction_warning=warning)


def _int(value: Any, default: int = 0) -> int:
    """A number from a hash field; ``default`` for a missing or unreadable one (the tools read
    whatever is in Redis and must not fail on one odd field)."""
    try:
        return int(float(value))
    except (TypeError, ValueError, OverflowError):
        return default


def _read_workers(queue: Queue, now_ms: int) -> tuple[list[WorkerEntry], list[str]]:
    """The live workers, and the ids of registry entries that cannot be read."""
    registry = queue.worker_registry()
    return registry.entries, registry.unreadable
