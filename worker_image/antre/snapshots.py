"""Reading a queue's :class:`~antre.findings.Snapshot` from Redis: the I/O side of ``antre
inspect``, ``doctor``, ``top`` and the dashboard.

The reads are written once, as a generator (:func:`_reads`) that yields each round trip it needs
(a script, a pipeline of plain commands, a bounded SCAN, a pause) and receives the reply.
:func:`read_snapshot` runs it on a sync client for the command line, :func:`read_snapshot_async`
on an asyncio client for the API's dashboard, so both show the same numbers from the same code.

Read-only and bounded whatever the queue's size: the depth script twice, then one pipeline
(ZRANGEBYSCORE on the processing and retry sets, ZREVRANGE of the newest dead ids, the running
jobs), one pipeline of HMGETs for the live records those name, the dead records not read before
(through :mod:`antre.protocol.read_records`: they are packed), the resource locks of the running jobs and
at most :data:`LOCK_SCAN_CALLS` SCAN calls over the lock prefix (which also finds locks no
running job explains), and the worker registry. :mod:`antre.findings` turns the snapshot into
findings and text. Key names come from :class:`antre.keys.QueueKeys` through the queue.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Generator, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, Final, TypeVar

import redis

from antre import connection, findings, redis_checks, topology
from antre.client import AsyncQueue, Queue
from antre.findings import Snapshot, Thresholds
from antre.keys import QueueKeys
from antre.protocol import scripts
from antre.protocol.depth import Depth, depth_op
from antre.protocol.read_records import fields_op
from antre.protocol.scripts import Op
from antre.protocol.workers import WorkerRegistry, workers_op
from antre.settings import QueueSettings

T = TypeVar("T")

#: Entries read per section: enough for one screen and for grouping, bounded for big queues.
READ_LIMIT: Final = 50
DEAD_READ_LIMIT: Final = 500
#: Running jobs whose resource locks are read (more than any pool's concurrency in practice).
RUNNING_READ_LIMIT: Final = 1000
#: The SCAN over the lock prefix stops after this many calls of COUNT :data:`SCAN_COUNT` keys:
#: the whole keyspace of a small database, a bounded sample of a big one (a million queued jobs
#: are a million keys to walk). Locks of running jobs are read directly, never by SCAN.
LOCK_SCAN_CALLS: Final = 10
SCAN_COUNT: Final = 1000
LOCK_SCAN_LIMIT: Final = 1000
#: Shown as the holder of a key under the lock prefix that is not a string (not antre's).
NOT_A_LOCK: Final = "(not a lock: wrong key type)"


# -- the round trips the reader asks for -----------------------------------------------------------

@dataclass(frozen=True, slots=True)
class _Pipeline:
    """Plain commands in one non-transactional pipeline."""

    calls: Sequence[tuple[str, tuple[Any, ...], dict[str, Any]]]
    #: False: a command's error comes back as its reply (a key of the wrong type under the lock
    #: prefix is reported, not fatal).
    raise_on_error: bool = True


def _call(name: str, *args: Any, **kwargs: Any) -> tuple[str, tuple[Any, ...], dict[str, Any]]:
    return name, args, kwargs


@dataclass(frozen=True, slots=True)
class _Scan:
    """SCAN MATCH ``match``: at most ``max_calls`` calls; replies (keys, complete)."""

    match: str
    max_calls: int = LOCK_SCAN_CALLS
    max_keys: int = LOCK_SCAN_LIMIT


@dataclass(frozen=True, slots=True)
class _Pause:
    seconds: float


@dataclass(frozen=True, slots=True)
class _EvictionWarning:
    """The maxmemory-policy warning (INFO memory of the server holding the queue of ``keys``);
    replies None when INFO is not allowed."""

    keys: QueueKeys


@dataclass(frozen=True, slots=True)
class _Topology:
    """The primary and its replicas (INFO replication, and the Sentinels' answer); replies None
    for a Redis Cluster or when INFO is not allowed."""


_Step = Op[Any] | _Pipeline | _Scan | _Pause | _EvictionWarning | _Topology
_Reader = Generator[_Step, Any, Snapshot]

DeadKey = tuple[str, float]
"""A dead letter as its ZSET member and score (the microsecond it died): a job that is replayed
and dies again has a new score, so its details are read again."""


class DeadCache(dict[DeadKey, findings.DeadJob]):
    """The details of the dead jobs last read, so a reader that polls (``antre top``, the
    dashboard) reads only the dead letters it has not seen. Each read replaces the content with
    exactly the jobs it returned, so the cache never outgrows one read."""


def _dead_records(settings: QueueSettings, pairs: list[tuple[str, float]],
                  known: DeadCache | None) -> Generator[_Step, Any, list[list[str | None]]]:
    """The type, last error and time of death of the dead jobs of ``pairs`` that ``known``
    does not hold, read as they are stored (dead records are packed: no HMGET reads them), at
    most MAX_JOBS_PER_CALL per script call."""
    unknown = [job_id for job_id, score in pairs if known is None or (job_id, score) not in known]
    replies: list[list[str | None]] = []
    for chunk in scripts.chunked(unknown) if unknown else ():
        replies += yield fields_op(settings, chunk, ("type", "last_error", "died_at"))
    return replies


def _dead_jobs(pairs: list[tuple[str, float]], replies: Iterator[list[str | None]],
               known: DeadCache | None) -> list[findings.DeadJob]:
    """The dead jobs of ``pairs`` (newest first): known ones from the cache, the others from
    their HMGET replies, in order; the cache then holds exactly these."""
    jobs = []
    for job_id, score in pairs:
        job = known.get((job_id, score)) if known is not None else None
        if job is None:
            job_type, last_error, died_at = next(replies)
            job = findings.DeadJob(job_id=job_id, job_type=job_type or "?",
                                   last_error=last_error or "", died_at_ms=_int(died_at))
        jobs.append(job)
    if known is not None:
        known.clear()
        known.update(zip(pairs, jobs, strict=True))
    return jobs


def _dead_reads(settings: QueueSettings, limit: int,
                known: DeadCache | None) -> Generator[_Step, Any, list[findings.DeadJob]]:
    k = settings.keys
    [pairs] = yield _Pipeline((_call("zrevrange", k.dead, 0, limit - 1, withscores=True),))
    replies = yield from _dead_records(settings, pairs, known)
    return _dead_jobs(pairs, iter(replies), known)


def _reads(settings: QueueSettings, *, thresholds: Thresholds, before: Depth | None,
           sample_gap_s: float, known_dead: DeadCache | None = None) -> _Reader:
    """With no ``before`` and no gap, one depth read serves as both samples (no trend) rather
    than two reads back to back, whose few milliseconds make no rate."""
    after: Depth
    if before is None and sample_gap_s <= 0:
        before = after = yield depth_op(settings)
    else:
        if before is None:
            before = yield depth_op(settings)
            if sample_gap_s > 0:
                yield _Pause(sample_gap_s)
        after = yield depth_op(settings)
    k, now = settings.keys, after.now_ms
    overdue_cutoff = now - int(thresholds.overdue_after_s * 1000)
    expired, overdue_total, overdue, dead_pairs, running = yield _Pipeline((
        _call("zrangebyscore", k.processing, "-inf", now, start=0, num=READ_LIMIT,
              withscores=True),
        _call("zcount", k.retry, "-inf", overdue_cutoff),
        _call("zrangebyscore", k.retry, "-inf", overdue_cutoff, start=0, num=READ_LIMIT,
              withscores=True),
        _call("zrevrange", k.dead, 0, DEAD_READ_LIMIT - 1, withscores=True),
        _call("zrange", k.processing, 0, RUNNING_READ_LIMIT - 1),
    ))
    scanned_keys, scan_complete = yield _Scan(k.lock_prefix + "*")

    calls = [_call("hmget", k.job(job_id), "type", "worker", "attempt") for job_id, _ in expired]
    calls += [_call("hget", k.job(job_id), "resource_key") for job_id in running]
    # A job acked between the two reads may be a packed record (a String) by now: its error
    # reply says it is no longer running.
    replies = iter((yield _Pipeline(calls, raise_on_error=False)) if calls else ())
    # A job delayed at enqueue is still a field of the queued Hash: read as every reader reads.
    overdue_replies: list[list[str | None]] = []
    for chunk in scripts.chunked([job_id for job_id, _ in overdue]) if overdue else ():
        overdue_replies += yield fields_op(settings, chunk, ("type", "attempt", "last_error"))
    dead_replies = yield from _dead_records(settings, dead_pairs, known_dead)

    leases = []
    for job_id, deadline in expired:
        fields = next(replies)
        if isinstance(fields, Exception):  # settled and packed since the first read
            continue
        job_type, worker, attempt = fields
        leases.append(findings.ExpiredLease(
            job_id=job_id, job_type=job_type or "?", worker=worker or "",
            attempt=_int(attempt), expired_for_s=max(now - deadline, 0) / 1000))
    retries = []
    for (job_id, due), (job_type, attempt, last_error) in zip(overdue, overdue_replies,
                                                              strict=True):
        retries.append(findings.OverdueRetry(
            job_id=job_id, job_type=job_type or "?", attempt=_int(attempt),
            overdue_s=max(now - due, 0) / 1000, last_error=last_error or ""))
    dead = _dead_jobs(dead_pairs, iter(dead_replies), known_dead)
    # The locks running jobs hold, found through their records, then whatever SCAN added.
    lock_keys = list(dict.fromkeys(
        [k.resource_lock(resource) for resource in (next(replies) for _ in running)
         if isinstance(resource, str) and resource] + list(scanned_keys)))
    lock_replies = iter((yield _Pipeline(
        [c for key in lock_keys for c in (_call("get", key), _call("pttl", key))],
        raise_on_error=False)) if lock_keys else ())
    holders: list[tuple[str, str, float | None]] = []
    for key in lock_keys:
        value, pttl = next(lock_replies), _int(next(lock_replies), -2)
        if value is None or pttl == -2:  # expired between the reads
            continue
        holder = NOT_A_LOCK if isinstance(value, Exception) else str(value).split(":", 1)[0]
        holders.append((key[len(k.lock_prefix):], holder, None if pttl < 0 else pttl / 1000))
    scores = (yield _Pipeline([_call("zscore", k.processing, job_id)
                               for _resource, job_id, _ttl in holders])) if holders else []
    locks = [findings.ResourceLock(resource=resource, job_id=job_id, ttl_s=ttl,
                                   holder_processing=score is not None)
             for (resource, job_id, ttl), score in zip(holders, scores, strict=True)]

    registry: WorkerRegistry = yield workers_op(settings)
    warning = yield _EvictionWarning(settings.keys)
    servers = yield _Topology()
    return Snapshot(queue=settings.name, before=before, after=after, expired_leases=leases,
                    overdue_retries=retries, overdue_total=int(overdue_total), dead_jobs=dead,
                    locks=sorted(locks, key=lambda lock: lock.resource),
                    locks_complete=scan_complete,
                    workers=sorted(registry.entries, key=lambda w: w.worker_id),
                    bad_worker_entries=registry.unreadable, eviction_warning=warning,
                    topology=servers, durable_replicas=settings.durable_replicas,
                    queued_fields=registry.queued_fields,
                    hashes_for_ms=registry.hashes_for_ms)


def _int(value: Any, default: int = 0) -> int:
    """A number from a hash field; ``default`` for a missing or unreadable one (the tools read
    whatever is in Redis and must not fail on one odd field)."""
    try:
        return int(float(value))
    except (TypeError, ValueError, OverflowError):
        return default


# -- the two drivers -------------------------------------------------------------------------------

def _run(client: Any, reader: Generator[_Step, Any, T],
         sleep: Callable[[float], None] = time.sleep) -> T:
    """Runs a reader on a sync client (``redis.Redis`` or its cluster twin)."""
    reply: Any = None
    while True:
        try:
            step = reader.send(reply)
        except StopIteration as done:
            return done.value  # type: ignore[no-any-return]
        if isinstance(step, Op):
            reply = scripts.run(client, step)
        elif isinstance(step, _Pipeline):
            pipe = client.pipeline(transaction=False)
            for name, args, kwargs in step.calls:
                getattr(pipe, name)(*args, **kwargs)
            reply = pipe.execute(raise_on_error=step.raise_on_error)
        elif isinstance(step, _Scan):
            reply = _scan(client, step)
        elif isinstance(step, _Pause):
            sleep(step.seconds)
            reply = None
        elif isinstance(step, _Topology):
            try:
                reply = topology.read(client)
            except redis.ResponseError:  # INFO may be renamed or disabled on managed Redis
                reply = None
        else:
            try:
                reply = redis_checks.eviction_policy_warning_sync(client, step.keys)
            except redis.ResponseError:  # INFO may be renamed or disabled on managed Redis
                reply = None


async def _run_async(client: Any, reader: Generator[_Step, Any, T]) -> T:
    """Runs a reader on an asyncio client; a pause step does not wait (callers pass the
    sample to compare with)."""
    reply: Any = None
    while True:
        try:
            step = reader.send(reply)
        except StopIteration as done:
            return done.value  # type: ignore[no-any-return]
        if isinstance(step, Op):
            reply = await scripts.run_async(client, step)
        elif isinstance(step, _Pipeline):
            pipe = client.pipeline(transaction=False)
            for name, args, kwargs in step.calls:
                getattr(pipe, name)(*args, **kwargs)
            reply = await pipe.execute(raise_on_error=step.raise_on_error)
        elif isinstance(step, _Scan):
            reply = await _scan_async(client, step)
        elif isinstance(step, _Pause):
            reply = None
        elif isinstance(step, _Topology):
            try:
                reply = await topology.read_async(client)
            except redis.ResponseError:
                reply = None
        else:
            try:
                reply = await redis_checks.eviction_policy_warning(client, step.keys)
            except redis.ResponseError:
                reply = None


def read_snapshot(queue: Queue, *, sample_gap_s: float = 1.0, thresholds: Thresholds | None = None,
                  before: Depth | None = None, sleep: Callable[[float], None] = time.sleep,
                  known_dead: DeadCache | None = None) -> Snapshot:
    """Reads the queue's state. The trend compares ``before`` (or a first reading taken
    ``sample_gap_s`` earlier; with no gap, one reading and no trend) with the current depth. A
    caller that reads again and again passes the same ``known_dead`` each time (see
    :class:`DeadCache`)."""
    return _run(queue.redis, _reads(queue.settings, thresholds=thresholds or Thresholds(),
                                    before=before, sample_gap_s=sample_gap_s,
                                    known_dead=known_dead), sleep)


async def read_snapshot_async(queue: AsyncQueue, *, thresholds: Thresholds | None = None,
                              before: Depth | None = None,
                              known_dead: DeadCache | None = None) -> Snapshot:
    """:func:`read_snapshot` on an asyncio client, without a pause: the trend compares with
    ``before`` (without one, there is no trend)."""
    return await _run_async(queue.redis, _reads(
        queue.settings, thresholds=thresholds or Thresholds(), before=before, sample_gap_s=0,
        known_dead=known_dead))


async def read_dead_jobs_async(queue: AsyncQueue, *, limit: int,
                               known_dead: DeadCache | None = None) -> list[findings.DeadJob]:
    """The newest ``limit`` dead jobs, read as the snapshot reads them (for a wider window than
    :data:`DEAD_READ_LIMIT`, as the dashboard's dead-letter page groups)."""
    return await _run_async(queue.redis, _dead_reads(queue.settings, limit, known_dead))


def _scan(client: Any, step: _Scan) -> tuple[list[str], bool]:
    if connection.is_cluster_client(client):  # cursors per node: the client's iterator, bounded by keys found
        keys: list[str] = []
        for key in client.scan_iter(match=step.match, count=SCAN_COUNT):
            keys.append(key)
            if len(keys) >= step.max_keys:
                return keys, False
        return keys, True
    cursor, keys = 0, []
    for _ in range(step.max_calls):
        cursor, batch = client.scan(cursor, match=step.match, count=SCAN_COUNT)
        keys.extend(batch)
        if int(cursor) == 0 or len(keys) >= step.max_keys:
            return keys[:step.max_keys], int(cursor) == 0
    return keys, False


async def _scan_async(client: Any, step: _Scan) -> tuple[list[str], bool]:
    if connection.is_cluster_client(client):
        keys: list[str] = []
        async for key in client.scan_iter(match=step.match, count=SCAN_COUNT):
            keys.append(key)
            if len(keys) >= step.max_keys:
                return keys, False
        return keys, True
    cursor, keys = 0, []
    for _ in range(step.max_calls):
        cursor, batch = await client.scan(cursor, match=step.match, count=SCAN_COUNT)
        keys.extend(batch)
        if int(cursor) == 0 or len(keys) >= step.max_keys:
            return keys[:step.max_keys], int(cursor) == 0
    return keys, False
