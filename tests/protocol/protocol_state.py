"""Seeding and dumping a queue's Redis state for the per-script tests (asynq's TestDone shape).

``seed_job`` writes a job record and puts its id where its status says; ``dump`` reads every key
of the queue back as plain data with the clock-dependent fields left out, so a test can compare
the whole final state with one ``==``. Scores and timestamps are checked separately, against the
Redis clock (``server_ms``).
"""

from __future__ import annotations

import itertools
import json
import time
from typing import Any

from antre import jobs
from antre.protocol import scripts
from antre.protocol.claim import claim_op
from antre.settings import QueueSettings, WorkerSettings
from invariants import job_ids_of, read_records

_DEAD_ORDER = itertools.count()

#: Job hash fields that hold a time; ``dump`` leaves them out (tests check them by bounds).
TIME_FIELDS = {"created_at", "updated_at", "queued_at", "died_at", "finished_at"}


def server_ms(r: Any) -> int:
    seconds, micros = r.time()
    return int(seconds) * 1000 + int(micros) // 1000


def last_attempt_with_a_waiter(r: Any, qs: QueueSettings, ws: WorkerSettings, *, holder: str,
                               waiter: str, holder_worker: str, waiter_worker: str) -> Any:
    """Job ``holder``, on its last attempt, claimed with resource ``acct``; job ``waiter``
    claimed after it and deferred for the busy resource. Returns the holder's claimed job."""
    seed_job(r, qs, holder, max_attempts=1, resource_key="acct")
    [held] = scripts.run(r, claim_op(qs, ws, worker_id=holder_worker, max_jobs=1)).jobs
    seed_job(r, qs, waiter, resource_key="acct")
    assert scripts.run(r, claim_op(qs, ws, worker_id=waiter_worker, max_jobs=1)).jobs == []
    return held


def outlive_lease(r: Any, qs: QueueSettings, job_id: str) -> None:
    """Returns once the Redis clock is past ``job_id``'s lease deadline (the lease, and the
    resource lock the claim gave the same length, run out for real). Sleeps for the time left by
    Redis's clock (the time passing is the point, not an event to wait for), then looks again."""
    deadline = r.zscore(qs.keys.processing, job_id)
    while (left_ms := deadline - server_ms(r)) >= 0:
        time.sleep((left_ms + 1) / 1000)


def seed_job(r: Any, qs: QueueSettings, job_id: str, *, status: str = "queued", attempt: int = 0,
             max_attempts: int = 5, lease: int = 0, idempotency_key: str | None = None,
             resource_key: str | None = None, score_ms: int | None = None, job_type: str = "t",
             payload: Any = None, worker: str = "w1", **extra: Any) -> None:
    """A job record in ``status``; ``score_ms`` is the lease deadline (processing, default in
    30 s) or the due time (scheduled/retrying, default already due). A processing job was
    claimed by ``worker`` (the settle scripts fence on it, with the lease token)."""
    k = qs.keys
    now = server_ms(r)
    fields: dict[str, Any] = {
        "id": job_id, "type": job_type, "payload": json.dumps(payload), "status": status,
        "attempt": attempt, "max_attempts": max_attempts, "lease": lease, "created_at": now,
        "updated_at": now, "queued_at": now, "schema_version": 1, "events": 0,
    }
    if idempotency_key:
        fields["idempotency_key"] = idempotency_key
    if resource_key:
        fields["resource_key"] = resource_key
    if status == "processing":
        fields["worker"] = worker
    fields.update(extra)
    r.hset(k.job(job_id), mapping=fields)
    if status == "queued":
        r.lpush(k.ready, job_id)
    elif status == "processing":
        r.zadd(k.processing, {job_id: now + 30_000 if score_ms is None else score_ms})
        if resource_key:
            r.set(k.resource_lock(resource_key), f"{job_id}:{lease}", px=30_000)
    elif status in ("scheduled", "retrying"):
        r.zadd(k.retry, {job_id: now - 1 if score_ms is None else score_ms})
    elif status == "dead":
        # Scored in microseconds, as the scripts do; seeded later means died later.
        r.zadd(k.dead, {job_id: now * 1000 + next(_DEAD_ORDER)})


def history(fields: dict[str, str]) -> list[str]:
    return [entry.event for entry in jobs.read_history(fields)]


def dump(r: Any, qs: QueueSettings) -> dict[str, Any]:
    """Every key of the queue as plain data. Job records (read in either form) lose their time
    fields; their history ring becomes the list of event names under ``history``."""
    k = qs.keys
    base = k.scan_pattern()[:-1]
    state: dict[str, Any] = {
        "ready": r.lrange(k.ready, 0, -1),
        "processing": r.zrange(k.processing, 0, -1),
        "retry": r.zrange(k.retry, 0, -1),
        "dead": r.zrevrange(k.dead, 0, -1),  # newest first
        "stats": {name: int(v) for name, v in r.hgetall(k.stats).items()},
        "jobs": {},
        "locks": {},
        "idem": {},
    }
    keyed, queued = job_ids_of(r, qs)
    job_ids = keyed + queued
    for job_id, fields in zip(job_ids, read_records(r, qs, job_ids), strict=True):
        job = {name: v for name, v in fields.items()
               if name not in TIME_FIELDS and not name.startswith("h:")}
        job["history"] = history(fields)
        state["jobs"][job_id] = job
    for key in r.scan_iter(match=base + "lock:*"):
        state["locks"][key[len(k.lock_prefix):]] = r.get(key)
    for key in r.scan_iter(match=base + "idem:*"):
        state["idem"][key[len(k.idempotency_prefix):]] = r.get(key)
    return state


def run_fresh(r: Any, op: scripts.Op[Any]) -> Any:
    """Runs ``op`` after SCRIPT FLUSH: the wrapper must reload the script on NOSCRIPT."""
    r.script_flush()
    assert not r.script_exists(op.script.sha)[0]
    result = scripts.run(r, op)
    assert r.script_exists(op.script.sha)[0]
    return result
