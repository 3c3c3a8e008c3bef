"""Workers: the live entries of a queue's worker registry, in one read-only round trip
(:file:`workers.lua`). Each worker writes its own entry with every heartbeat
(:mod:`antre.protocol.extend_lease`)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from antre.protocol.scripts import Op, bounded_int, load
from antre.settings import QueueSettings


@dataclass(frozen=True, slots=True)
class WorkerEntry:
    worker_id: str
    pod: str
    host: str
    pid: int
    in_flight: int
    concurrency: int
    last_beat_ms: int
    started_at_ms: int
    #: Server clock (ms) when the registry was read, to compute beat ages.
    read_at_ms: int
    #: Handler threads past their job timeout that still hold a slot (they cannot be stopped).
    stuck_threads: int = 0
    #: Jobs whose resource lock this worker keeps for a handler thread still running past its
    #: timeout (the heartbeat extends the lock until the thread returns).
    kept_lock_jobs: tuple[str, ...] = ()
    #: False for a worker of an earlier version, which claims a job only from its own Hash
    #: (PROTOCOL.md "Versions"): it drops a job queued as a field when it pops its id.
    claims_queued_fields: bool = True

    @property
    def beat_age_s(self) -> float:
        return max(self.read_at_ms - self.last_beat_ms, 0) / 1000


@dataclass(frozen=True, slots=True)
class WorkerRegistry:
    entries: list[WorkerEntry]
    #: Ids of live entries that cannot be read (bad JSON, not an object, wrong field types).
    unreadable: list[str]
    #: Jobs queued as fields of the queue's queued Hash when the registry was read.
    queued_fields: int = 0
    #: How much longer enqueues write Hashes because a worker of an earlier version was seen
    #: (PROTOCOL.md "Versions"), in ms; None when they do not (-1: the key has no expiry).
    hashes_for_ms: int | None = None


def workers_op(settings: QueueSettings) -> Op[WorkerRegistry]:
    k = settings.keys

    def parse(reply: list[Any]) -> WorkerRegistry:
        now = bounded_int(reply[0])
        entries, unreadable = [], []
        for i in range(3, len(reply), 4):
            # One unreadable entry (another version, a hand edit) must not hide the others.
            try:
                raw = json.loads(reply[i + 2])
                entries.append(WorkerEntry(
                    worker_id=str(reply[i]), pod=str(raw.get("pod", "")),
                    host=str(raw.get("host", "")), pid=bounded_int(raw.get("pid", 0)),
                    in_flight=bounded_int(raw.get("in_flight", 0)),
                    concurrency=bounded_int(raw.get("concurrency", 0)),
                    last_beat_ms=bounded_int(float(reply[i + 1])),
                    started_at_ms=bounded_int(raw.get("started_at_ms", 0)), read_at_ms=now,
                    stuck_threads=bounded_int(raw.get("stuck_threads", 0)),
                    kept_lock_jobs=tuple(str(job) for job in raw.get("kept_locks") or ()),
                    claims_queued_fields=int(reply[i + 3]) == 1,
                ))
            except (ValueError, TypeError, AttributeError):
                unreadable.append(str(reply[i]))
        hashes_for_ms = bounded_int(reply[2])
        return WorkerRegistry(entries=entries, unreadable=unreadable,
                              queued_fields=bounded_int(reply[1]),
                              hashes_for_ms=None if hashes_for_ms == -2 else hashes_for_ms)

    return Op(load("workers"), [k.workers, k.field_readers, k.queued, k.earlier_workers],
              [k.worker_prefix], parse)
