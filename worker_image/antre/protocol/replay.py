"""Replay: dead jobs back to the queue with a fresh attempt budget (:file:`replay.lua`)."""

from __future__ import annotations

from collections.abc import Sequence

from antre.protocol.scripts import Durability, Op, check_id_count, load
from antre.settings import QueueSettings


def replay_op(settings: QueueSettings, job_ids: Sequence[str] = (), *, limit: int = 1000) -> Op[list[str]]:
    """Replays the given dead jobs (at most 1000), or with no ids the
    ``limit`` oldest ones; returns the ids replayed (ids that are not dead are skipped)."""
    check_id_count(job_ids)
    k = settings.keys
    return Op(load("replay"), [k.ready, k.dead, k.stats], [k.job_prefix, limit, *job_ids],
              lambda reply: [str(x) for x in reply], durable=Durability.of(settings))

