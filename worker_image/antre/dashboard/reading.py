"""What the dashboard's pages read from Redis beyond the shared numbers: windows of a state's
list or set, one job's full record, a search, the dead letters grouped by error.

Every count comes from the depth script (:meth:`antre.AsyncQueue.stats`, as for ``antre stats``
and the API), every finding from :mod:`antre.snapshots` and :mod:`antre.findings` (as for
``antre doctor``); this module only reads rows. A window is one range command on the list or
set (LRANGE, ZRANGE or ZREVRANGE by rank) and one read of the summary fields of its records
(:mod:`antre.protocol.read_records`, which reads live and packed records alike), so a page costs
the same at a thousand jobs as at a million, and a row never loads a payload.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Final

from antre import findings, snapshots
from antre.client import AsyncQueue
from antre.jobs import JobInfo
from antre.protocol import scripts
from antre.protocol.depth import Depth
from antre.protocol.read_records import fields_op, records_op

#: Rows per page of a state's list.
PAGE_SIZE: Final = 50
#: Largest dead-letter window the grouping reads (three fields of each record).
MAX_GROUP_SCAN: Final = 5000
DEFAULT_GROUP_SCAN: Final = 500
#: The payload is shown pretty-printed up to this many characters.
PAYLOAD_SHOWN_CHARS: Final = 64 * 1024
#: Job ids, as the API accepts them (letters, digits, '-', '_', '.'; at most 128).
MAX_JOB_ID_CHARS: Final = 128

_ROW_FIELDS: Final = ("id", "type", "status", "attempt", "max_attempts", "created_at",
                      "updated_at", "last_error", "worker", "idempotency_key", "resource_key",
                      "died_at")


class State(StrEnum):
    """The four places a live job can be, with the names the API's stats use."""

    #: The ready list; page 1 is the head of the line (next to run).
    READY = "ready"
    #: The processing set, soonest lease deadline first.
    PROCESSING = "processing"
    #: The retry set (retries, delayed jobs, jobs waiting for a busy resource), soonest due first.
    SCHEDULED = "scheduled"
    #: The dead letters (a ZSET by time of death), newest first.
    DEAD = "dead"

    def total(self, depth: Depth) -> int:
        return {State.READY: depth.ready, State.PROCESSING: depth.processing,
                State.SCHEDULED: depth.scheduled, State.DEAD: depth.dead}[self]


@dataclass(frozen=True, slots=True)
class JobRow:
    job_id: str
    #: 1-based place in the list or set as shown (1 = next to run, soonest, newest).
    position: int
    fields: dict[str, str]
    #: Lease deadline (processing) or due time (scheduled), ms; None for lists.
    score_ms: int | None = None

    @property
    def missing(self) -> bool:
        """The id is listed but its record is gone (expired or evicted)."""
        return "id" not in self.fields


@dataclass(frozen=True, slots=True)
class Window:
    state: State
    rows: list[JobRow]
    page: int
    pages: int
    total: int


def page_count(total: int, page_size: int = PAGE_SIZE) -> int:
    return max(1, math.ceil(total / page_size))


async def read_window(queue: AsyncQueue, state: State, *, page: int, total: int,
                      page_size: int = PAGE_SIZE) -> Window:
    """Rows ``page`` (1-based, clamped to the last page) of ``state``; ``total`` is the depth's
    count for that state, read just before."""
    pages = page_count(total, page_size)
    page = min(max(page, 1), pages)
    first = (page - 1) * page_size
    last = first + page_size - 1
    k, redis_client = queue.keys, queue.redis
    scores: list[int | None]
    if state is State.READY:
        # Producers push at the left and workers pop at the right: read from the right end, so
        # deep pages near either end stay cheap, and show the head of the line first.
        ids = list(reversed(await redis_client.lrange(k.ready, -last - 1, -first - 1)))
        scores = [None] * len(ids)
    elif state is State.DEAD:
        # Scored by the microsecond of death: newest first.
        ids = await redis_client.zrevrange(k.dead, first, last)
        scores = [None] * len(ids)
    else:
        key = k.processing if state is State.PROCESSING else k.retry
        pairs = await redis_client.zrange(key, first, last, withscores=True)
        ids = [member for member, _ in pairs]
        scores = [int(score) for _, score in pairs]
    replies = (await scripts.run_async(redis_client, fields_op(queue.settings, ids, _ROW_FIELDS))
               if ids else [])
    rows = [JobRow(job_id=job_id, position=first + i + 1, score_ms=score,
                   fields={name: value for name, value in zip(_ROW_FIELDS, reply, strict=True)
                           if value is not None})
            for i, (job_id, score, reply) in enumerate(zip(ids, scores, replies, strict=True))]
    return Window(state=state, rows=rows, page=page, pages=pages, total=total)


def valid_job_id(job_id: str) -> bool:
    """The API's rule: at most 128 of letters, digits, '-', '_' and '.'."""
    return 0 < len(job_id) <= MAX_JOB_ID_CHARS and job_id.replace("-", "").replace(
        "_", "").replace(".", "").isalnum()


@dataclass(frozen=True, slots=True)
class JobDetail:
    job_id: str
    #: The record parsed as ``antre job`` and the API parse it; None without an id field.
    info: JobInfo | None
    #: What in the record cannot be decoded (an undecodable payload, no id), else None.
    unreadable: str | None
    #: Every stored field except the history ring and the checkpoints, which ``info`` holds.
    attributes: dict[str, str]
    now_ms: int
    lease_deadline_ms: int | None
    due_at_ms: int | None
    #: The job that holds the job's resource lock now (None: unlocked or no resource key).
    lock_holder: str | None
    lock_ttl_ms: int | None
    #: What the idempotency key points at: ``<id>`` while live, ``<id>|done`` once completed.
    idempotency_marker: str | None
    payload_text: str = ""
    payload_chars: int = 0

    @property
    def payload_truncated(self) -> bool:
        return self.payload_chars > len(self.payload_text)


async def read_job(queue: AsyncQueue, job_id: str) -> JobDetail | None:
    """The job's record and where it sits, in three round trips (the record, its place in the
    sets, its lock and idempotency key); None when there is no record."""
    if not valid_job_id(job_id):
        return None
    k, redis_client = queue.keys, queue.redis
    [record] = await scripts.run_async(redis_client, records_op(queue.settings, [job_id]))
    if not record:
        return None
    pipe = redis_client.pipeline(transaction=True)  # one consistent view of the sets
    pipe.zscore(k.processing, job_id)
    pipe.zscore(k.retry, job_id)
    pipe.time()
    deadline, due, (seconds, micros) = await pipe.execute()
    # JobInfo.from_hash never raises for a record with an id (what it cannot decode it keeps
    # as text and names in payload_error); a record without one is shown by its raw fields.
    info = JobInfo.from_hash(record) if "id" in record else None
    unreadable = info.payload_error if info is not None else "the record has no id field"
    resource, idempotency_key = record.get("resource_key"), record.get("idempotency_key")
    pipe = redis_client.pipeline(transaction=False)
    if resource:
        pipe.get(k.resource_lock(resource))
        pipe.pttl(k.resource_lock(resource))
    if idempotency_key:
        pipe.get(k.idempotency(idempotency_key))
    replies = list(await pipe.execute(raise_on_error=False)) if (resource or idempotency_key) else []
    lock_holder = lock_ttl = marker = None
    if resource:
        value, ttl = replies.pop(0), replies.pop(0)
        if isinstance(value, str):
            lock_holder = value.split(":", 1)[0]
            lock_ttl = int(ttl) if isinstance(ttl, int) and ttl >= 0 else None
    if idempotency_key:
        value = replies.pop(0)
        marker = value if isinstance(value, str) else None
    payload_text = (json.dumps(info.payload, indent=2, ensure_ascii=False, sort_keys=True)
                    if info is not None and not unreadable else str(record.get("payload", "")))
    return JobDetail(
        job_id=job_id, info=info, unreadable=unreadable,
        attributes={name: value for name, value in sorted(record.items())
                    if not name.startswith(("h:", "step:")) and name != "payload"},
        now_ms=int(seconds) * 1000 + int(micros) // 1000,
        lease_deadline_ms=None if deadline is None else int(deadline),
        due_at_ms=None if due is None else int(due),
        lock_holder=lock_holder, lock_ttl_ms=lock_ttl, idempotency_marker=marker,
        payload_text=payload_text[:PAYLOAD_SHOWN_CHARS], payload_chars=len(payload_text))


async def find_job(queue: AsyncQueue, text: str) -> str | None:
    """The id of the job ``text`` names: a job id, or else a live or completed idempotency key."""
    text = text.strip()
    if not text:
        return None
    k, redis_client = queue.keys, queue.redis
    pipe = redis_client.pipeline(transaction=False)
    # A job not claimed yet is a field of the queued Hash; any other has its own key.
    pipe.exists(k.job(text) if valid_job_id(text) else k.job("-"))
    pipe.hexists(k.queued, text)
    pipe.get(k.idempotency(text))
    exists, queued, marker = await pipe.execute()
    if (exists or queued) and valid_job_id(text):
        return text
    if isinstance(marker, str):
        return marker.split("|", 1)[0]
    return None


@dataclass(frozen=True, slots=True)
class DeadScan:
    """The newest ``scanned`` dead jobs grouped by last error, as ``antre doctor`` groups them."""

    groups: list[findings.DeadGroup]
    #: Ids of each group, newest first, keyed by the group's last error.
    ids_by_error: dict[str, list[str]] = field(default_factory=dict)
    scanned: int = 0
    total: int = 0


async def read_dead_groups(queue: AsyncQueue, depth: Depth, *,
                           scan: int = DEFAULT_GROUP_SCAN,
                           known_dead: snapshots.DeadCache | None = None) -> DeadScan:
    """Groups the newest ``scan`` dead jobs, read by the snapshot reader's own code (one
    ZREVRANGE, then the records of the ones ``known_dead`` does not hold)."""
    scan = min(max(scan, 1), MAX_GROUP_SCAN)
    dead = await snapshots.read_dead_jobs_async(queue, limit=scan, known_dead=known_dead)
    snapshot = findings.Snapshot(queue=queue.name, before=depth, after=depth, dead_jobs=dead)
    ids_by_error: dict[str, list[str]] = {}
    for job in dead:
        ids_by_error.setdefault(job.last_error, []).append(job.job_id)
    return DeadScan(groups=findings.group_dead(snapshot), ids_by_error=ids_by_error,
                    scanned=len(dead), total=depth.dead)
