"""Ack: settle leased jobs as done, in a batch (:file:`ack.lua`).

Every lease carries the token the claim handed out; a stale one changes nothing and is reported
per job, so one lost lease never fails the acks batched beside it.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from antre.protocol.scripts import Lease, Op, lease_args, load
from antre.settings import QueueSettings


def _flags(reply: list[Any]) -> list[bool]:
    return [bool(int(flag)) for flag in reply]


def ack_op(settings: QueueSettings, leases: Sequence[Lease], *, worker_id: str) -> Op[list[bool]]:
    """Marks jobs done; returns, per lease, whether it was still held (False = lease lost)."""
    k = settings.keys
    return Op(
        load("ack"),
        [k.processing, k.stats],
        [int(settings.done_ttl_s * 1000), int(settings.idempotency_done_ttl_s * 1000),
         k.job_prefix, k.idempotency_prefix, k.lock_prefix, worker_id, *lease_args(leases)],
        _flags,
    )
