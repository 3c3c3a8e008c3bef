"""Claim: lease up to N ready jobs to a worker in one round trip (due retries promoted first)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from antre.jobs import ClaimedJob
from antre.protocol import scripts
from antre.protocol.scripts import Durability, Op, load
from antre.settings import QueueSettings, WorkerSettings

#: Due retries moved to the ready list per claim call.
PROMOTE_LIMIT = 100
_FIELDS = 10
_DUPLICATE_FIELDS = 5


@dataclass(frozen=True, slots=True)
class Duplicate:
    """A claimed job whose idempotency key was already done: settled without running."""

    id: str
    type: str
    idempotency_key: str
    #: The runs it had before (no attempt is spent on it).
    attempt: int
    resource_key: str | None


@dataclass(frozen=True, slots=True)
class ClaimResult:
    jobs: list[ClaimedJob]
    #: The due time (ms, Redis clock) of the next scheduled job, or None (a claim sent again
    #: after a lost reply does not read it).
    next_due_ms: int | None
    #: The Redis clock (ms) at the call, to turn next_due_ms into a wait.
    now_ms: int | None
    duplicates: list[Duplicate] = field(default_factory=list)
    #: Redis heard no heartbeat from this worker for a whole lease (it was frozen or cut off):
    #: nothing was leased, and the worker beats before it claims again.
    silent_worker: bool = False
    #: The claim was sent again after its reply was lost: ``jobs`` are the leases its first
    #: sending made that are still held, leased at this time (ms, Redis clock), not at now_ms.
    replayed_claimed_at_ms: int | None = None


def _parse(reply: list[Any]) -> ClaimResult:
    if int(reply[0]) == 0:
        next_due = int(reply[1])
        return ClaimResult(jobs=[], next_due_ms=None if next_due < 0 else next_due,
                           now_ms=int(reply[2]), silent_worker=len(reply) > 3)
    if int(reply[0]) == 2:
        claimed_at, now = int(reply[1]), int(reply[2])
        return ClaimResult(jobs=_jobs(reply, 3, claimed_at), next_due_ms=None, now_ms=now,
                           replayed_claimed_at_ms=claimed_at)
    n_duplicates, next_due, now = int(reply[1]), int(reply[2]), int(reply[3])
    duplicates = [Duplicate(id=reply[i], type=reply[i + 1], idempotency_key=reply[i + 2],
                            attempt=int(reply[i + 3]), resource_key=reply[i + 4] or None)
                  for i in range(4, 4 + _DUPLICATE_FIELDS * n_duplicates, _DUPLICATE_FIELDS)]
    return ClaimResult(jobs=_jobs(reply, 4 + _DUPLICATE_FIELDS * n_duplicates, now),
                       next_due_ms=None if next_due < 0 else next_due, now_ms=now,
                       duplicates=duplicates)


def _jobs(reply: list[Any], first: int, claimed_at_ms: int) -> list[ClaimedJob]:
    return [ClaimedJob(
        id=reply[i], type=reply[i + 1], payload_json=reply[i + 2], attempt=int(reply[i + 3]),
        max_attempts=int(reply[i + 4]), lease=int(reply[i + 5]),
        idempotency_key=reply[i + 6] or None, resource_key=reply[i + 7] or None,
        created_at_ms=int(reply[i + 8]), headers_json=reply[i + 9], claimed_at_ms=claimed_at_ms,
    ) for i in range(first, len(reply), _FIELDS)]


def claim_op(settings: QueueSettings, worker_settings: WorkerSettings, *, worker_id: str,
             max_jobs: int, claim_id: str | None = None) -> Op[ClaimResult]:
    """Claims up to ``max_jobs``, at most MAX_JOBS_PER_CALL in one call (a worker with more
    free slots claims again at once). With a ``claim_id`` (new for each claim) the claim can be
    sent again when its reply is lost: Redis then answers the leases the first sending made
    instead of leasing more, and none is stranded until it expires."""
    k = settings.keys
    max_jobs = min(max_jobs, scripts.MAX_JOBS_PER_CALL)
    return Op(
        load("claim"),
        [k.ready, k.processing, k.retry, k.stats, k.dead, k.queued, k.workers,
         k.last_claim(worker_id)],
        [
            max_jobs, worker_settings.lease_ms, worker_id, k.job_prefix, k.idempotency_prefix,
            k.lock_prefix, PROMOTE_LIMIT, int(worker_settings.lock_defer_s * 1000),
            worker_settings.lock_max_deferrals, int(settings.done_ttl_s * 1000),
            claim_id or "", k.waiting_prefix,
        ],
        _parse,
        # A claim lost in a failover would let the new primary lease the job (or its resource)
        # again while this run goes on: durable claims are confirmed before a handler starts.
        durable=Durability.of(settings),
    )
