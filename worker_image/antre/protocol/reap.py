"""The reaper pass: requeue expired leases, promote due retries, drop stale registry entries,
move dead ids older versions listed and delete dead letters past their retention (:file:`reap.lua`)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from antre.protocol.scripts import Op, load
from antre.settings import QueueSettings


@dataclass(frozen=True, slots=True)
class ReapResult:
    #: False when another process held the pass lock, so nothing was done.
    ran: bool
    requeued: int
    dead: int
    promoted: int
    workers_dropped: int
    #: True when a batch limit was hit: run another pass straight away.
    more: bool
    #: Dead letters deleted because they outlived the queue's dead_ttl_s.
    dead_expired: int = 0


def reap_op(settings: QueueSettings, *, limit: int, pass_lock_ms: int, holder: str) -> Op[ReapResult]:
    """``pass_lock_ms=0`` runs unconditionally (the CLI); workers pass a short lock so one
    process per queue does the work at a time."""
    k = settings.keys

    def parse(reply: list[Any]) -> ReapResult:
        ran, requeued, dead, promoted, dropped, more, dead_expired = (int(x) for x in reply)
        return ReapResult(ran=bool(ran), requeued=requeued, dead=dead, promoted=promoted,
                          workers_dropped=dropped, more=bool(more), dead_expired=dead_expired)

    return Op(
        load("reap"),
        [k.ready, k.processing, k.retry, k.dead, k.stats, k.reaper_lock, k.workers, k.legacy_dead,
         k.queued, k.field_readers, k.earlier_workers],
        [limit, pass_lock_ms, holder, k.job_prefix, k.lock_prefix, k.worker_prefix,
         k.idempotency_prefix, int(settings.dead_ttl_s * 1000), k.waiting_prefix],
        parse,
    )
