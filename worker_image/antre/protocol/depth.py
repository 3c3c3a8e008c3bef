"""Reading a queue's depth and its live workers (read-only scripts, one round trip each).

The operator's autoscaler and the inspection tools read through here, never by key names.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from antre.protocol.scripts import Op, load
from antre.settings import QueueSettings


@dataclass(frozen=True, slots=True)
class Depth:
    now_ms: int
    ready: int
    processing: int
    #: Leases past their deadline that no reaper pass has requeued yet.
    expired_leases: int
    #: Jobs in the retry set: retries and delayed jobs, due or not.
    scheduled: int
    #: Of those, the ones already due (a growing number means no reaper or worker is running).
    due: int
    dead: int
    #: How long the next job to be claimed has waited, in seconds; None when nothing is ready.
    oldest_ready_age_s: float | None
    workers: int
    counters: dict[str, int] = field(default_factory=dict)

    @property
    def backlog(self) -> int:
        """Jobs that could start now if there were workers for them."""
        return self.ready + self.due


def depth_op(settings: QueueSettings) -> Op[Depth]:
    k = settings.keys

    def parse(reply: list[Any]) -> Depth:
        stats = reply[9]
        return Depth(
            now_ms=int(reply[0]), ready=int(reply[1]), processing=int(reply[2]),
            expired_leases=int(reply[3]), scheduled=int(reply[4]), due=int(reply[5]),
            dead=int(reply[6]),
            oldest_ready_age_s=None if int(reply[7]) < 0 else int(reply[7]) / 1000,
            workers=int(reply[8]),
            counters={stats[i]: int(stats[i + 1]) for i in range(0, len(stats), 2)},
        )

    return Op(load("depth"), [k.ready, k.processing, k.retry, k.dead, k.stats, k.workers],
              [k.job_prefix], parse)


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

    @property
    def beat_age_s(self) -> float:
        return max(self.read_at_ms - self.last_beat_ms, 0) / 1000


@dataclass(frozen=True, slots=True)
class WorkerRegistry:
    entries: list[WorkerEntry]
    #: Ids of live entries that cannot be read (bad JSON, not an object, wrong field types).
    unreadable: list[str]


def workers_op(settings: QueueSettings) -> Op[WorkerRegistry]:
    k = settings.keys

    def parse(reply: list[Any]) -> WorkerRegistry:
        now = int(reply[0])
        entries, unreadable = [], []
        for i in range(1, len(reply), 3):
            # One unreadable entry (another version, a hand edit) must not hide the others.
            try:
                raw = json.loads(reply[i + 2])
                entries.append(WorkerEntry(
                    worker_id=str(reply[i]), pod=str(raw.get("pod", "")),
                    host=str(raw.get("host", "")), pid=int(raw.get("pid", 0)),
                    in_flight=int(raw.get("in_flight", 0)),
                    concurrency=int(raw.get("concurrency", 0)),
                    last_beat_ms=int(float(reply[i + 1])),
                    started_at_ms=int(raw.get("started_at_ms", 0)), read_at_ms=now,
                ))
            except (ValueError, TypeError, AttributeError):
                unreadable.append(str(reply[i]))
        return WorkerRegistry(entries=entries, unreadable=unreadable)

    return Op(load("workers"), [k.workers], [k.worker_prefix], parse)
