"""Depth: everything an autoscaler or a dashboard needs about a queue, in one read-only round
trip (:file:`depth.lua`).

The operator's autoscaler and the inspection tools read through here, never by key names.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from antre.protocol.scripts import Op, bounded_int, load
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
        # Bounded: a hostile server's huge number fails the read (ValueError), not the caller.
        counts = [bounded_int(value) for value in reply[:9]]
        stats = reply[9]
        return Depth(
            now_ms=counts[0], ready=counts[1], processing=counts[2],
            expired_leases=counts[3], scheduled=counts[4], due=counts[5], dead=counts[6],
            oldest_ready_age_s=None if counts[7] < 0 else counts[7] / 1000,
            workers=counts[8],
            counters={stats[i]: bounded_int(stats[i + 1]) for i in range(0, len(stats), 2)},
        )

    return Op(load("depth"),
              [k.ready, k.processing, k.retry, k.dead, k.stats, k.workers, k.legacy_dead, k.queued],
              [k.job_prefix], parse)
