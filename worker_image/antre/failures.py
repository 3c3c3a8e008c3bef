"""How a run failed, decided apart from any I/O: :class:`Failure` and the functions that turn
what happened (an exception from the handler, a type without a handler) into one."""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Final

from antre.errors import LeaseLost, Permanent, Retry
from antre.handler_threads import HandlerExit, ThreadTimeout
from antre.jobs import ClaimedJob

#: How long after its enqueue a job of a type this worker has no handler for keeps being retried
#: (without spending attempts) before it is dead-lettered: during a rolling deploy, old workers
#: meet the new types of new producers.
UNKNOWN_TYPE_GRACE_S: Final = 900.0


@dataclass(frozen=True, slots=True)
class Failure:
    """Why a run failed, and how to settle it."""

    error: str
    #: Retry after this many seconds; None uses the backoff.
    delay_s: float | None = None
    #: Straight to dead: retrying is useless.
    permanent: bool = False
    #: Keep the resource lock: the run may still be going (a thread past its timeout).
    keep_lock: bool = False
    #: Give the attempt back: the handler never ran (its type is unknown here).
    refund_attempt: bool = False


def from_exception(exc: BaseException, *, timeout_s: float | None) -> Failure:
    """The failure a handler's exception stands for."""
    if isinstance(exc, Retry):
        return Failure(f"Retry: {exc}", delay_s=exc.delay)
    if isinstance(exc, Permanent):
        return Failure(f"Permanent: {exc}", permanent=True)
    if isinstance(exc, ThreadTimeout):
        return Failure(f"timed out after {timeout_s} s (job timeout); the handler thread could "
                       "not be interrupted and may still be running", keep_lock=True)
    if isinstance(exc, TimeoutError):
        return Failure(f"timed out after {timeout_s} s (job timeout)")
    if isinstance(exc, LeaseLost):
        return Failure(f"lease lost: {exc}")
    if isinstance(exc, HandlerExit):  # its message names what the handler raised
        return Failure(str(exc))
    return Failure(f"{type(exc).__name__}: {exc}")


def unknown_type(claimed: ClaimedJob, served: list[str],
                 rng: random.Random | None = None) -> Failure:
    """No handler here: retried without spending an attempt (another worker, or this one after a
    deploy, may know the type) until the job is UNKNOWN_TYPE_GRACE_S old, then dead."""
    error = f"unknown job type {claimed.type!r}; this worker serves {served}"
    age_s = max(claimed.claimed_at_ms - claimed.created_at_ms, 0) / 1000
    if age_s >= UNKNOWN_TYPE_GRACE_S:
        return Failure(f"{error} (for {age_s:.0f} s)", permanent=True)
    # The wait grows with the job's age: quick while a rollout is under way, then seldom.
    delay_s = min(max(age_s / 4, 1.0), 60.0) * (rng or random).uniform(0.5, 1.0)
    return Failure(error, delay_s=delay_s, refund_attempt=True)
