"""Fail: a run failed; retry the job after a delay, or dead-letter it (:file:`fail.lua`)."""

from __future__ import annotations

from dataclasses import dataclass

from antre.protocol.scripts import Lease, Op, load
from antre.settings import QueueSettings


@dataclass(frozen=True, slots=True)
class FailResult:
    #: "retrying" or "dead".
    outcome: str
    #: For retrying: when the next attempt is due (ms, Redis clock); for dead: when it died.
    at_ms: int


def fail_op(settings: QueueSettings, lease: Lease, *, error: str, retry_delay_ms: int | None,
            worker_id: str, keep_lock: bool = False, refund_attempt: bool = False) -> Op[FailResult]:
    """``retry_delay_ms=None`` dead-letters at once (a permanent failure). ``keep_lock`` keeps
    the resource lock for a run that may still be going, such as a handler thread past its
    timeout: its worker extends the lock until the thread returns (:mod:`unlock`).
    ``refund_attempt`` gives the attempt back (the handler never ran). Raises
    :class:`antre.LeaseLost` when the lease is not held any more."""
    k = settings.keys
    job_id, token = lease
    return Op(
        load("fail"),
        [k.processing, k.retry, k.dead, k.stats, k.job(job_id), k.ready],
        [job_id, token, error[:4000], -1 if retry_delay_ms is None else max(retry_delay_ms, 0),
         worker_id, k.lock_prefix, 1 if keep_lock else 0, 1 if refund_attempt else 0,
         k.waiting_prefix],
        lambda reply: FailResult(outcome=str(reply[0]), at_ms=int(reply[1])),
    )
