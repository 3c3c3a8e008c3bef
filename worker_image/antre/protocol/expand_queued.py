"""Expanding queued fields into job Hashes (:file:`expand_queued.lua`), before workers are rolled
back to a version that claims only Hashes (PROTOCOL.md "Versions")."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from antre.protocol.scripts import MAX_JOBS_PER_CALL, Op, load
from antre.settings import QueueSettings


@dataclass(frozen=True, slots=True)
class Expanded:
    #: Where the next call goes on scanning the queued Hash; "0" once the scan is done.
    cursor: str
    #: Fields turned into their job's Hash by this call.
    expanded: int
    #: Fields still in the queued Hash after it.
    left: int
    #: Workers of this version registered: while there are any, nothing is expanded (enqueues
    #: would go on writing fields).
    field_readers: int
    #: Fields of this call left as they are because their id has a job key too (a hand edit).
    clashing: tuple[str, ...]


def _parse(reply: list[Any]) -> Expanded:
    return Expanded(cursor=str(reply[0]), expanded=int(reply[1]), left=int(reply[2]),
                    field_readers=int(reply[3]), clashing=tuple(str(id_) for id_ in reply[4:]))


def expand_queued_op(settings: QueueSettings, cursor: str = "0", *,
                     requeue: bool = False) -> Op[Expanded]:
    """One step of the scan of the queue's queued fields from ``cursor`` (about
    MAX_JOBS_PER_CALL fields); ``requeue`` also pushes each expanded job that is not delayed to
    the head of the ready list."""
    k = settings.keys
    return Op(load("expand_queued"), [k.queued, k.retry, k.workers, k.field_readers, k.ready],
              [k.job_prefix, cursor, MAX_JOBS_PER_CALL, 1 if requeue else 0], _parse)
