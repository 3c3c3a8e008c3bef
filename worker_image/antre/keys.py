"""Every Redis key antre uses, built in one place.

All keys of one queue share the Cluster hash tag ``{queue}``, so every script that
touches several of them runs in one slot. No other module spells a key: they call
these builders (a test greps the tree for the literal prefix).

Layout for prefix ``antre`` and queue ``Q`` (Redis type in brackets):

- ``antre:{Q}:queue``        [List]   ready job ids; producers LPUSH, workers pop from the right
- ``antre:{Q}:processing``   [ZSET]   job id -> lease deadline (ms since epoch)
- ``antre:{Q}:retry``        [ZSET]   job id -> due time (ms); retries and delayed jobs
- ``antre:{Q}:dead_letters`` [ZSET]   dead-lettered job id -> when it died (microseconds)
- ``antre:{Q}:dead``         [List]   dead ids as older versions kept them; the reaper moves them
- ``antre:{Q}:queued``       [Hash]   job id -> the packed record of a job not claimed yet (enqueue writes
                                      it; the claim turns it into the job's own Hash)
- ``antre:{Q}:job:<id>``     [Hash]   the job record once claimed (packed String once finished or dead;
                                      see PROTOCOL.md)
- ``antre:{Q}:idem:<key>``   [String] idempotency key -> ``<job id>[|<digest>]``, then ``...|done``
- ``antre:{Q}:lock:<res>``   [String] resource lock -> ``<job id>:<lease token>``
- ``antre:{Q}:stats``        [Hash]   counters (done, dead, retried, ...)
- ``antre:{Q}:workers``      [ZSET]   worker id -> last heartbeat (ms)
- ``antre:{Q}:field_readers`` [ZSET]  the same, for workers that claim queued fields (this version
                                      on); enqueue writes fields only while it holds every worker
- ``antre:{Q}:earlier_workers`` [String] set for an hour each time a worker of an earlier version is
                                      seen registered; no fields are written while it exists
- ``antre:{Q}:worker:<wid>`` [String] JSON registry entry of a live worker, with a TTL
- ``antre:{Q}:reaper``       [String] short lock that lets one process run a reaper pass

One key is not a queue's: ``antre:queues`` [Set], the names of the queues under the prefix, so
the dashboard finds them without scanning the keyspace. It lives in a slot of its own, so it is
written with a plain SADD beside the scripts, never inside one (Cluster-safe).
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass, field
from typing import Final

from antre import errors

DEFAULT_PREFIX: Final = "antre"

# Queue names end up inside a hash tag and in Kubernetes labels: keep them plain. The CRD's
# schema and the operator use the same patterns. fullmatch, not match: '$' also matches before a
# trailing newline, which would let "q\n" through into keys and headers.
QUEUE_NAME_PATTERN: Final = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")
PREFIX_PATTERN: Final = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._:-]{0,63}$")


def validate_queue_name(queue: str) -> str:
    if not isinstance(queue, str) or not QUEUE_NAME_PATTERN.fullmatch(queue):
        raise errors.InvalidArgument(
            f"queue: got {queue!r}; must be 1-128 characters of letters, digits, '.', '_' or '-',"
            " starting with a letter or digit"
        )
    return queue


def validate_prefix(prefix: str) -> str:
    if not isinstance(prefix, str) or not PREFIX_PATTERN.fullmatch(prefix):
        raise errors.InvalidArgument(
            f"prefix: got {prefix!r}; must be 1-64 characters of letters, digits, '.', '_', ':'"
            " or '-', starting with a letter or digit"
        )
    return prefix


def queue_registry(prefix: str = DEFAULT_PREFIX) -> str:
    """[Set] names of the queues under ``prefix`` (no hash tag: never touched by a script)."""
    return f"{validate_prefix(prefix)}:queues"


@dataclass(frozen=True, slots=True)
class QueueKeys:
    """The key builders of one queue under one prefix."""

    queue_name: str
    prefix: str = DEFAULT_PREFIX

    #: ``<prefix>:{<queue>}:``, what every key of the queue starts with.
    base: str = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        validate_queue_name(self.queue_name)
        validate_prefix(self.prefix)
        object.__setattr__(self, "base", f"{self.prefix}:{{{self.queue_name}}}:")

    @property
    def ready(self) -> str:
        return self.base + "queue"

    @property
    def queued(self) -> str:
        """The records of jobs enqueued and not yet claimed, one field each (an id names a job
        while its field here or its own key exists)."""
        return self.base + "queued"

    @property
    def processing(self) -> str:
        return self.base + "processing"

    @property
    def retry(self) -> str:
        return self.base + "retry"

    @property
    def dead(self) -> str:
        """The dead letters."""
        return self.base + "dead_letters"

    @property
    def legacy_dead(self) -> str:
        """The dead list of older versions, emptied by the reaper (older workers may still push to it
        during a rolling upgrade)."""
        return self.base + "dead"

    @property
    def stats(self) -> str:
        return self.base + "stats"

    @property
    def workers(self) -> str:
        return self.base + "workers"

    @property
    def field_readers(self) -> str:
        """The workers that claim jobs from the queued Hash: every registered worker of this
        version and later, as in :attr:`workers`. Earlier workers drop an id without a job key,
        so enqueue writes a queued field only while every member of :attr:`workers` is here."""
        return self.base + "field_readers"

    @property
    def earlier_workers(self) -> str:
        """Set while, and for an hour after, a worker of an earlier version was registered:
        enqueue writes no queued field meanwhile (PROTOCOL.md "Versions")."""
        return self.base + "earlier_workers"

    @property
    def reaper_lock(self) -> str:
        return self.base + "reaper"

    @property
    def job_prefix(self) -> str:
        """Scripts that find job ids in a list build ``job_prefix .. id`` (same slot)."""
        return self.base + "job:"

    @property
    def idempotency_prefix(self) -> str:
        return self.base + "idem:"

    @property
    def lock_prefix(self) -> str:
        return self.base + "lock:"

    @property
    def waiting_prefix(self) -> str:
        """``waiting_prefix + resource``: the jobs deferred for that busy resource (ZSET, id ->
        first deferral), the longest-waiting woken by the ack that frees its lock."""
        return self.base + "waiting:"

    @property
    def worker_prefix(self) -> str:
        return self.base + "worker:"

    def job(self, job_id: str) -> str:
        return self.job_prefix + job_id

    def idempotency(self, key: str) -> str:
        return self.idempotency_prefix + key

    def resource_lock(self, resource_key: str) -> str:
        return self.lock_prefix + resource_key

    def worker(self, worker_id: str) -> str:
        return self.worker_prefix + worker_id

    def last_claim(self, worker_id: str) -> str:
        """The worker's last claim that leased jobs, kept for a lease: a claim sent again after
        its reply was lost answers those leases instead of stranding them."""
        return self.base + "claim:" + worker_id

    def scan_pattern(self) -> str:
        """A SCAN MATCH pattern for every key of this queue (braces are glob-safe here)."""
        return self.prefix + ":[{]" + self.queue_name + "[}]:*"


@functools.lru_cache(maxsize=1024)
def of_queue(queue_name: str, prefix: str = DEFAULT_PREFIX) -> QueueKeys:
    """The keys of one queue, built and validated once (a worker reads them for every claim
    and ack: 1.4 us each time here)."""
    return QueueKeys(queue_name, prefix)
