"""The exception hierarchy of antre.

Handler authors use :class:`Retry` and :class:`Permanent`; everything else is raised by the
client or the worker. Every message names the field, the value and what is allowed.
"""

from __future__ import annotations

from typing import Any

from antre import limits


class AntreError(Exception):
    """Base class of every error antre raises on purpose."""


class InvalidArgument(AntreError, ValueError):
    """A caller passed a value antre cannot accept; the message says which and why.

    ``enqueued``: when Redis refuses one of the later script calls of an ``enqueue_many`` (it
    writes 200 jobs per call), the results of the jobs the earlier calls wrote; empty otherwise.
    """

    enqueued: tuple[Any, ...] = ()


class PayloadTooLarge(InvalidArgument):
    """The encoded payload is over the queue's size limit."""


class IdempotencyConflict(InvalidArgument):
    """The idempotency key already names a job of another type or payload: a key dedupes one
    request, it does not hand out the job of a different one (the API answers 409)."""


class JobNotFound(AntreError, LookupError):
    """No job with that id exists (never did, or its record expired)."""


class LeaseLost(AntreError):
    """The lease token is no longer current: the job was requeued, settled or cancelled."""


class JobBusy(AntreError):
    """The job is being processed, so the operation is refused (for example cancel)."""


class RedisUnavailable(AntreError):
    """Redis could not be reached or answered with an error that is not ours."""


class RedisRefused(RedisUnavailable):
    """Redis is up but refuses writes for now: out of memory (noeviction) or a read-only
    replica during a failover. Retry later, as for an outage."""


class NotReplicated(RedisUnavailable):
    """A durable write (``QueueSettings.durable_replicas``) is done on the primary but fewer
    replicas than required confirmed it in time, so a failover now could lose it. Retrying is
    safe where the write is idempotent (an enqueue with an idempotency key, an ack).
    ``result`` is what the write returned (the job ids of an enqueue)."""

    def __init__(self, message: str, *, confirmed: int, wanted: int, result: object) -> None:
        super().__init__(message)
        self.confirmed = confirmed
        self.wanted = wanted
        self.result = result


class ProtocolError(AntreError):
    """A script replied with something its wrapper does not understand."""


def check_delay(name: str, delay: object) -> None:
    """Refuses a delay that is not a number of seconds from 0 to
    :data:`antre.limits.MAX_DELAY_S`."""
    if isinstance(delay, bool) or not isinstance(delay, int | float) or not (
            0 <= delay <= limits.MAX_DELAY_S):
        raise InvalidArgument(f"{name}: got {delay!r}; must be a number of seconds from 0 to "
                              f"{limits.MAX_DELAY_S:,} (ten years)")


class Retry(Exception):
    """Raise from a handler to retry the job later.

    ``delay`` is in seconds; ``None`` uses the queue's exponential backoff. The attempt counts.
    """

    def __init__(self, reason: str = "retry requested", *, delay: float | None = None) -> None:
        super().__init__(reason)
        if delay is not None:
            check_delay("Retry.delay", delay)
        self.delay = delay


class Permanent(Exception):
    """Raise from a handler when retrying is useless: the job goes straight to dead."""
