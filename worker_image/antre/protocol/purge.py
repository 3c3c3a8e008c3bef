"""Purge: delete dead jobs for good, records and idempotency keys (:file:`purge.lua`)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

from antre.protocol.scripts import Op, bounded_int, check_id_count, load
from antre.settings import QueueSettings

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class OldestPurged:
    """What one call of a purge of the oldest dead jobs did."""

    purged: int
    """Letters it took off the dead letters and deleted (one whose record is gone counts).
    Fewer than it asked for: no letter at or below the cutoff is left."""
    cutoff: str
    """The score it took letters up to, for the purge's next call to pass on; '' when the
    dead letters were empty."""


def _purge(settings: QueueSettings, job_ids: Sequence[str], limit: int, cutoff: str,
           parse: Callable[[Any], T]) -> Op[T]:
    check_id_count(job_ids)
    k = settings.keys
    return Op(load("purge"), [k.dead, k.stats],
              [k.job_prefix, k.idempotency_prefix, limit, cutoff, *job_ids], parse)


def purge_op(settings: QueueSettings, job_ids: Sequence[str] = (), *, limit: int = 1000) -> Op[int]:
    """Purges the given dead jobs (at most 1000), or with no ids the ``limit`` oldest ones;
    returns how many."""
    return _purge(settings, job_ids, limit, "", lambda reply: bounded_int(reply[0]))


def purge_oldest_op(settings: QueueSettings, *, limit: int, cutoff: str = "") -> Op[OldestPurged]:
    """One call of a purge of the oldest dead jobs: deletes up to ``limit`` of the oldest
    letters scored at or below ``cutoff`` (what the purge's first call answered; ``""`` in the
    first call, which takes the newest score there is)."""

    def parse(reply: Any) -> OldestPurged:
        return OldestPurged(purged=bounded_int(reply[0]), cutoff=str(reply[1]))

    return _purge(settings, (), limit, cutoff, parse)
