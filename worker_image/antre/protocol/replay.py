"""Replay: dead jobs back to the queue with a fresh attempt budget (:file:`replay.lua`)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

from antre.protocol.scripts import Durability, Op, bounded_int, check_id_count, load
from antre.settings import QueueSettings

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class OldestReplayed:
    """What one call of a replay of the oldest dead jobs did."""

    taken: int
    """Ids it took off the dead letters: those replayed, and those dropped (a record gone or
    not dead). Fewer than it asked for: no letter at or below the cutoff is left."""
    cutoff: str
    """The score it took letters up to, for the replay's next call to pass on; '' when the
    dead letters were empty."""
    replayed: list[str]
    """The ids replayed, oldest first."""


def _replay(settings: QueueSettings, job_ids: Sequence[str], limit: int, cutoff: str,
            parse: Callable[[Any], T]) -> Op[T]:
    check_id_count(job_ids)
    k = settings.keys
    return Op(load("replay"), [k.ready, k.dead, k.stats], [k.job_prefix, limit, cutoff, *job_ids],
              parse, durable=Durability.of(settings))


def replay_op(settings: QueueSettings, job_ids: Sequence[str] = (), *, limit: int = 1000) -> Op[list[str]]:
    """Replays the given dead jobs (at most 1000), or with no ids the
    ``limit`` oldest ones; returns the ids replayed (ids that are not dead are skipped)."""
    return _replay(settings, job_ids, limit, "", lambda reply: [str(x) for x in reply[2:]])


def replay_oldest_op(settings: QueueSettings, *, limit: int, cutoff: str = "") -> Op[OldestReplayed]:
    """One call of a replay of the oldest dead jobs: takes up to ``limit`` of the oldest
    letters scored at or below ``cutoff`` (what the replay's first call answered; ``""`` in
    the first call, which takes the newest score there is), and replays those still dead."""

    def parse(reply: Any) -> OldestReplayed:
        return OldestReplayed(taken=bounded_int(reply[0]), cutoff=str(reply[1]),
                              replayed=[str(x) for x in reply[2:]])

    return _replay(settings, (), limit, cutoff, parse)
