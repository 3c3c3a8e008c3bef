"""Settling a leased job: ack (done), fail (retry or dead) and release (back to the queue).

Every call carries the lease token the claim handed out; a stale token changes nothing and is
reported (per job for the batched ack and release, as :class:`antre.LeaseLost` for fail).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from antre.protocol.scripts import Op, ScriptArg, load
from antre.settings import QueueSettings

Lease = tuple[str, int]
"""(job id, lease token)."""


def _flat(leases: Sequence[Lease]) -> list[ScriptArg]:
    args: list[ScriptArg] = []
    for job_id, token in leases:
        args.append(job_id)
        args.append(token)
    return args


def _flags(reply: list[Any]) -> list[bool]:
    return [bool(int(flag)) for flag in reply]


def ack_op(settings: QueueSettings, leases: Sequence[Lease], *, worker_id: str) -> Op[list[bool]]:
    """Marks jobs done; returns, per lease, whether it was still held (False = lease lost)."""
    k = settings.keys
    return Op(
        load("ack"),
        [k.processing, k.stats],
        [int(settings.done_ttl_s * 1000), int(settings.idempotency_done_ttl_s * 1000),
         k.job_prefix, k.idempotency_prefix, k.lock_prefix, worker_id, *_flat(leases)],
        _flags,
    )


@dataclass(frozen=True, slots=True)
class FailResult:
    #: "retrying" or "dead".
    outcome: str
    #: For retrying: when the next attempt is due (ms, Redis clock); for dead: when it died.
    at_ms: int


def fail_op(settings: QueueSettings, lease: Lease, *, error: str, retry_delay_ms: int | None,
            worker_id: str, keep_lock: bool = False) -> Op[FailResult]:
    """``retry_delay_ms=None`` dead-letters at once (a permanent failure). ``keep_lock`` leaves
    the resource lock to expire (its TTL is the lease) instead of freeing it: for a run that may
    still be going, such as a handler thread past its timeout."""
    k = settings.keys
    job_id, token = lease
    return Op(
        load("fail"),
        [k.processing, k.retry, k.dead, k.stats, k.job(job_id)],
        [job_id, token, error[:4000], -1 if retry_delay_ms is None else max(retry_delay_ms, 0),
         worker_id, k.lock_prefix, 1 if keep_lock else 0],
        lambda reply: FailResult(outcome=str(reply[0]), at_ms=int(reply[1])),
    )


def release_op(settings: QueueSettings, leases: Sequence[Lease], *, worker_id: str,
               reason: str) -> Op[list[bool]]:
    """Gives jobs back to the head of the queue with the attempt refunded."""
    k = settings.keys
    return Op(
        load("release"),
        [k.ready, k.processing, k.stats],
        [k.job_prefix, k.lock_prefix, worker_id, reason, *_flat(leases)],
        _flags,
    )


def checkpoint_op(settings: QueueSettings, lease: Lease, *, step: str, value_json: str,
                  worker_id: str) -> Op[None]:
    k = settings.keys
    job_id, token = lease
    return Op(load("checkpoint"), [k.job(job_id)], [token, step, value_json, worker_id],
              lambda _: None)
