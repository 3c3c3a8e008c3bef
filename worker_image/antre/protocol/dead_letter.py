"""The dead-letter list: replay (back to the queue with fresh attempts) and purge."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from antre.protocol.scripts import Op, load
from antre.settings import QueueSettings


def replay_op(settings: QueueSettings, job_ids: Sequence[str] = (), *, limit: int = 1000) -> Op[list[str]]:
    """Replays the given dead jobs, or with no ids the ``limit`` oldest ones."""
    k = settings.keys
    return Op(load("replay"), [k.ready, k.dead, k.stats], [k.job_prefix, limit, *job_ids],
              lambda reply: [str(x) for x in reply])


def purge_op(settings: QueueSettings, job_ids: Sequence[str] = (), *, limit: int = 1000) -> Op[int]:
    k = settings.keys

    def parse(reply: Any) -> int:
        return int(reply)

    return Op(load("purge"), [k.dead, k.stats],
              [k.job_prefix, k.idempotency_prefix, limit, *job_ids], parse)


def cancel_op(settings: QueueSettings, job_id: str) -> Op[str]:
    """Withdraws a job that is not running; returns the status it had."""
    k = settings.keys
    return Op(load("cancel"), [k.ready, k.retry, k.dead, k.stats, k.job(job_id)],
              [job_id, int(settings.done_ttl_s * 1000), k.idempotency_prefix], str)
