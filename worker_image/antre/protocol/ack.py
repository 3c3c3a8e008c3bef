"""Ack: settle leased jobs as done, in a batch (:file:`ack.lua`).

Every lease carries the token the claim handed out; a lease that is not held any more changes
nothing and is reported per job, so one lost lease never fails the acks batched beside it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from antre.protocol.scripts import Durability, Lease, Op, lease_args, load
from antre.settings import QueueSettings


@dataclass(frozen=True, slots=True)
class AckResult:
    #: The Redis clock at the ack (ms), for end-to-end latencies on one clock.
    now_ms: int
    #: Per lease: True acked, False not held any more (the result is discarded).
    held: list[bool]


def ack_op(settings: QueueSettings, leases: Sequence[Lease], *, worker_id: str,
           retry_window_ms: int = 60_000) -> Op[AckResult]:
    """Marks jobs done. ``retry_window_ms``: with ``done_ttl_s=0``, how long a retried ack (its
    first reply lost) is still answered as acked."""
    k = settings.keys

    def parse(reply: list[Any]) -> AckResult:
        return AckResult(now_ms=int(reply[0]), held=[bool(int(flag)) for flag in reply[1:]])

    return Op(
        load("ack"),
        [k.processing, k.stats, k.ready, k.dead, k.retry],
        [int(settings.done_ttl_s * 1000), int(settings.idempotency_done_ttl_s * 1000),
         k.job_prefix, k.idempotency_prefix, k.lock_prefix, worker_id, max(retry_window_ms, 1),
         k.waiting_prefix, *lease_args(leases)],
        parse,
        durable=Durability.of(settings),  # a lost ack would run the job again
    )
