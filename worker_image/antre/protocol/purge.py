"""Purge: delete dead jobs for good, records and idempotency keys (:file:`purge.lua`)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from antre.protocol.scripts import Op, check_id_count, load
from antre.settings import QueueSettings


def purge_op(settings: QueueSettings, job_ids: Sequence[str] = (), *, limit: int = 1000) -> Op[int]:
    """Purges the given dead jobs (at most 1000), or with no ids the ``limit`` oldest ones;
    returns how many."""
    check_id_count(job_ids)
    k = settings.keys

    def parse(reply: Any) -> int:
        return int(reply)

    return Op(load("purge"), [k.dead, k.stats],
              [k.job_prefix, k.idempotency_prefix, limit, *job_ids], parse)
