"""The queue invariant, checked against what is actually in Redis.

``assert_invariants(redis_client, queue_settings)`` is called after every protocol scenario and by
the fault tests once the system is quiet. It checks, for one queue:

- no id appears twice in the ready list, the processing set, the retry set or the dead letters,
  and no id is in two of them;
- every job record sits exactly where its status says: queued -> ready list, processing -> processing
  set, scheduled/retrying -> retry set, dead -> dead letters, done/cancelled -> none of them, except
  that a cancelled job's id may stay in the ready list until a claim pops and drops it;
- every id in a list or set has a record (nothing points at a vanished job), except those
  cancelled ids in the ready list, whose record may have expired;
- a record without an id is only the stub an ack leaves with done_ttl_s=0 (status done);
- counters are consistent: 0 <= attempt <= max_attempts, attempt <= lease (each claim bumps both,
  only release and replay give an attempt back), a processing job holds a lease >= 1 with
  attempt >= 1, a job waiting to run has an attempt left;
- a resource lock is held by ``<id>:<lease>`` of a job that is processing under that very lease,
  or that keeps it for that lease (``lock_kept``: a thread still running after its job was
  settled); every other transition frees its lock, so none dangles;
- an idempotency marker is ``<id>[|<digest>]``, then ``...|done``; a job that succeeded has its key
  marked done, and a live job's key does not expire before the job.

``redis_client`` must decode responses (the shared ``redis_client`` fixture does).
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from antre.protocol import scripts
from antre.protocol.read_records import records_op
from antre.settings import QueueSettings

_WHERE = {
    "queued": "ready",
    "processing": "processing",
    "scheduled": "retry",
    "retrying": "retry",
    "dead": "dead",
    "done": None,
    "cancelled": None,
}


@dataclass
class Snapshot:
    """Everything of one queue the invariant looks at, read in one go."""

    ready: list[str]
    processing: dict[str, float]
    processing_order: list[str]
    retry: dict[str, float]
    retry_order: list[str]
    dead: list[str]
    jobs: dict[str, dict[str, str]]
    #: Ids with both a key of their own and a field in the queued Hash (the claim turns one into
    #: the other in one script, cancel too: never both).
    keyed_and_queued: list[str] = field(default_factory=list)
    locks: dict[str, str] = field(default_factory=dict)
    idempotency: dict[str, str] = field(default_factory=dict)
    #: Idempotency keys with a TTL (ms left), the others have none.
    idempotency_ttl: dict[str, int] = field(default_factory=dict)

    def count(self, status: str) -> int:
        return sum(1 for fields in self.jobs.values() if fields.get("status") == status)


def read_records(redis_client: Any, queue: Any, job_ids: list[str]) -> list[dict[str, str]]:
    """Job records as every reader sees them, whichever form they are stored in (a Hash while
    live, packed once finished or dead); {} for no record. ``queue`` is a QueueSettings or a
    client queue."""
    settings = getattr(queue, "settings", queue)
    return [record for chunk in scripts.chunked(job_ids) if chunk
            for record in scripts.run(redis_client, records_op(settings, chunk))]


def read_record(redis_client: Any, queue: Any, job_id: str) -> dict[str, str]:
    """One job's record as :func:`read_records` reads it."""
    return read_records(redis_client, queue, [job_id])[0]


def as_queued_hash(redis_client: Any, queue: Any, job_id: str) -> None:
    """Turns a job still queued as a field of the queued Hash into its own queued Hash, as an
    older version or a producer in another language writes it, so a test can change one of its
    fields with HSET (the claim takes either form)."""
    settings = getattr(queue, "settings", queue)
    record = read_record(redis_client, settings, job_id)
    assert record.get("status") in ("queued", "scheduled"), record
    pipe = redis_client.pipeline(transaction=True)
    pipe.hdel(settings.keys.queued, job_id)
    pipe.hset(settings.keys.job(job_id), mapping=record)
    pipe.execute()


def _scan(redis_client: Any, pattern: str) -> list[str]:
    return sorted(set(redis_client.scan_iter(match=pattern, count=1000)))


def job_ids_of(redis_client: Any, queue_settings: QueueSettings) -> tuple[list[str], list[str]]:
    """The ids of the queue's jobs: those with a key of their own, and those that are still a
    field of the queued Hash (enqueued, not claimed yet)."""
    k = queue_settings.keys
    keyed = [key[len(k.job_prefix):]
             for key in _scan(redis_client, k.scan_pattern()[:-1] + "job:*")]
    return keyed, sorted(redis_client.hkeys(k.queued))


def snapshot(redis_client: Any, queue_settings: QueueSettings) -> Snapshot:
    k = queue_settings.keys
    base_pattern = k.scan_pattern()[:-1]  # "<prefix>:[{]<Q>[}]:"
    processing = redis_client.zrange(k.processing, 0, -1, withscores=True)
    retry = redis_client.zrange(k.retry, 0, -1, withscores=True)
    keyed, queued = job_ids_of(redis_client, queue_settings)
    job_ids = sorted(set(keyed) | set(queued))
    jobs = {job_id: fields for job_id, fields in
            zip(job_ids, read_records(redis_client, queue_settings, job_ids), strict=True) if fields}
    locks = {key[len(k.lock_prefix):]: redis_client.get(key)
             for key in _scan(redis_client, base_pattern + "lock:*")}
    idem_keys = _scan(redis_client, base_pattern + "idem:*")
    idem = {key[len(k.idempotency_prefix):]: redis_client.get(key) for key in idem_keys}
    idem_ttl = {key[len(k.idempotency_prefix):]: redis_client.pttl(key) for key in idem_keys}
    return Snapshot(
        ready=redis_client.lrange(k.ready, 0, -1),
        processing={member: score for member, score in processing},
        processing_order=[member for member, _ in processing],
        retry={member: score for member, score in retry},
        retry_order=[member for member, _ in retry],
        dead=redis_client.zrange(k.dead, 0, -1),
        jobs=jobs,
        keyed_and_queued=sorted(set(keyed) & set(queued)),
        locks={name: value for name, value in locks.items() if value is not None},
        idempotency={name: value for name, value in idem.items() if value is not None},
        idempotency_ttl={name: ttl for name, ttl in idem_ttl.items() if ttl >= 0},
    )


def violations(snap: Snapshot, *, check_locks: bool = True) -> list[str]:
    """Every broken rule, as readable lines (empty when the queue is consistent)."""
    problems: list[str] = [f"{job_id}: both a job key and a queued field"
                           for job_id in snap.keyed_and_queued]
    places = {"ready": snap.ready, "processing": snap.processing_order, "retry": snap.retry_order,
              "dead": snap.dead}
    # A cancelled job's id is left in the ready list for a claim to drop (removing it would
    # scan the list); its record may have expired since.
    places["ready"] = [job_id for job_id in snap.ready
                       if snap.jobs.get(job_id, {}).get("status", "cancelled") != "cancelled"]
    seen: dict[str, list[str]] = {}
    for place, ids in places.items():
        for job_id, n in Counter(ids).items():
            if n > 1:
                problems.append(f"{job_id}: {n} times in {place}")
            seen.setdefault(job_id, []).append(place)
    for job_id, where in seen.items():
        if len(where) > 1:
            problems.append(f"{job_id}: in several places at once: {where}")
        if job_id not in snap.jobs:
            problems.append(f"{job_id}: in {where} but has no job record")

    for job_id, fields in snap.jobs.items():
        status = fields.get("status")
        if status not in _WHERE:
            problems.append(f"{job_id}: unknown status {status!r}")
            continue
        if "id" not in fields and status == "done" and job_id not in seen:
            continue  # the stub of an ack with done_ttl_s=0, for a retried ack
        if fields.get("id") != job_id:
            problems.append(f"{job_id}: record id field is {fields.get('id')!r}")
        wanted = _WHERE[status]
        actual = seen.get(job_id, [])
        if wanted is None and actual:
            problems.append(f"{job_id}: status {status} but still in {actual}")
        elif wanted is not None and actual != [wanted]:
            problems.append(f"{job_id}: status {status} but found in {actual or 'nowhere'}"
                            f" (expected {wanted})")
        try:
            attempt = int(fields.get("attempt", "0"))
            max_attempts = int(fields.get("max_attempts", "0"))
            lease = int(fields.get("lease", "0"))
        except ValueError:
            problems.append(f"{job_id}: non-integer counters {fields!r}")
            continue
        if not 0 <= attempt <= max_attempts:
            problems.append(f"{job_id}: attempt {attempt} outside [0, max_attempts={max_attempts}]")
        if attempt > lease:
            problems.append(f"{job_id}: attempt {attempt} > lease counter {lease}")
        if status == "processing" and (lease < 1 or attempt < 1):
            problems.append(f"{job_id}: processing with lease {lease}, attempt {attempt}")
        if status in ("queued", "scheduled", "retrying") and attempt >= max_attempts:
            problems.append(f"{job_id}: {status} with no attempt left ({attempt}/{max_attempts})")
        if status == "done" and fields.get("outcome") == "succeeded" and fields.get("idempotency_key"):
            marker = snap.idempotency.get(fields["idempotency_key"])
            if marker is not None and not marker.endswith("|done"):
                problems.append(f"{job_id}: succeeded but its idempotency key is {marker!r}")

    if check_locks:
        for resource, holder in snap.locks.items():
            job_id, _, lease = holder.rpartition(":")
            fields = snap.jobs.get(job_id)
            if fields is not None and fields.get("lock_kept") == lease:
                continue  # kept for a run still going after its job was settled (a thread)
            if fields is None or fields.get("status") != "processing" or fields.get("lease") != lease:
                state = None if fields is None else (fields.get("status"), fields.get("lease"))
                problems.append(f"lock {resource}: held by {holder!r}, but that job is {state}")
            elif fields.get("resource_key") != resource:
                problems.append(f"lock {resource}: held by {job_id} whose resource_key is "
                                f"{fields.get('resource_key')!r}")

    for key, marker in snap.idempotency.items():
        done = marker.endswith("|done")
        job_id, _, digest = (marker[:-5] if done else marker).partition("|")
        if not job_id or "|" in digest:
            problems.append(f"idempotency key {key}: malformed marker {marker!r}")
        elif job_id in snap.jobs and "id" in snap.jobs[job_id] and (
                snap.jobs[job_id].get("idempotency_key") != key):
            problems.append(f"idempotency key {key}: points at {job_id}, whose key is "
                            f"{snap.jobs[job_id].get('idempotency_key')!r}")
        elif (not done and key in snap.idempotency_ttl and job_id in snap.jobs
              and snap.jobs[job_id].get("status") not in ("done", "cancelled")):
            problems.append(f"idempotency key {key}: expires in {snap.idempotency_ttl[key]} ms "
                            f"while its job {job_id} is live")
    return problems


def assert_invariants(redis_client: Any, queue_settings: QueueSettings, *,
                      check_locks: bool = True) -> Snapshot:
    """Fails with every broken rule listed; returns the snapshot for further assertions.

    ``check_locks=False`` skips the resource-lock rule, for a moment when a lock may legitimately
    outlive its holder's settle (for example a worker killed mid-job before the reaper ran)."""
    snap = snapshot(redis_client, queue_settings)
    problems = violations(snap, check_locks=check_locks)
    assert not problems, "queue invariant broken:\n  " + "\n  ".join(problems)
    return snap
