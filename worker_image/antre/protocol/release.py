"""Release: give leased jobs back to the head of the queue, attempt refunded (:file:`release.lua`).

What a graceful shutdown does with the jobs that did not finish within the grace period.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from antre.protocol.scripts import Lease, Op, lease_args, load
from antre.settings import QueueSettings


def release_op(settings: QueueSettings, leases: Sequence[Lease], *, worker_id: str,
               reason: str) -> Op[list[bool]]:
    """Returns, per lease, whether it was released (False = no longer the holder)."""
    k = settings.keys

    def parse(reply: list[Any]) -> list[bool]:
        return [bool(int(flag)) for flag in reply]

    return Op(
        load("release"),
        [k.ready, k.processing, k.stats],
        [k.job_prefix, k.lock_prefix, worker_id, reason, *lease_args(leases)],
        parse,
    )
