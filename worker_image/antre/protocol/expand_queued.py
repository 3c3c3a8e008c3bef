"""Expanding queued fields into job Hashes (:file:`expand_queued.lua`), before workers are rolled
back to a version that claims only Hashes (PROTOCOL.md "Versions")."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from antre.protocol.scripts import MAX_JOBS_PER_CALL, Op, load
from antre.settings import QueueSettings


@dataclass(frozen=True, slots=True)
class Expanded:
    #: Fields turned into their job's Hash by this call.
    expanded: int
    #: Fields still in the queued Hash after it.
    left: int
    #: Of those picked, fields left because their id has a job key already (a hand edit).
    clashing: int
    #: Workers of this version registered: while there are any, enqueues keep writing fields.
    field_readers: int


def _parse(reply: list[Any]) -> Expanded:
    return Expanded(*(int(value) for value in reply))


def expand_queued_op(settings: QueueSettings, limit: int = MAX_JOBS_PER_CALL) -> Op[Expanded]:
    """Expands up to ``limit`` (at most MAX_JOBS_PER_CALL) queued fields of the queue."""
    k = settings.keys
    return Op(load("expand_queued"), [k.queued, k.retry, k.field_readers],
              [k.job_prefix, min(limit, MAX_JOBS_PER_CALL)], _parse)
