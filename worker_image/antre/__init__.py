"""antre: a reliable Redis job queue.

Producers use :class:`Queue` / :class:`AsyncQueue`; handler modules use :func:`handler`,
:class:`Job`, :class:`Retry` and :class:`Permanent`; ``antre worker`` runs them.

The names below are loaded on first use (PEP 562), so a process imports only the modules it
touches: a worker, whose handler modules ``import antre`` for :func:`handler` and :class:`Job`,
never loads the producer's client, its inspection reads or their dataclasses (about a fifth of
its start on a small machine).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Final

if TYPE_CHECKING:
    from antre.backoff import Backoff
    from antre.client import AsyncQueue, Queue
    from antre.errors import (
        AntreError,
        IdempotencyConflict,
        InvalidArgument,
        JobBusy,
        JobNotFound,
        LeaseLost,
        NotReplicated,
        PayloadTooLarge,
        Permanent,
        RedisRefused,
        RedisUnavailable,
        Retry,
    )
    from antre.handlers import HandlerRegistry, default_registry, handler
    from antre.jobs import EnqueueResult, Job, JobInfo, JobStatus
    from antre.protocol.depth import Depth
    from antre.protocol.enqueue import NewJob
    from antre.protocol.workers import WorkerEntry
    from antre.settings import QueueSettings, WorkerSettings

__version__ = "0.1.0"

#: The module that defines each name of ``__all__`` (a test keeps the two in step).
_HOMES: Final = {
    "AntreError": "antre.errors",
    "AsyncQueue": "antre.client",
    "Backoff": "antre.backoff",
    "Depth": "antre.protocol.depth",
    "EnqueueResult": "antre.jobs",
    "HandlerRegistry": "antre.handlers",
    "IdempotencyConflict": "antre.errors",
    "InvalidArgument": "antre.errors",
    "Job": "antre.jobs",
    "JobBusy": "antre.errors",
    "JobInfo": "antre.jobs",
    "JobNotFound": "antre.errors",
    "JobStatus": "antre.jobs",
    "LeaseLost": "antre.errors",
    "NewJob": "antre.protocol.enqueue",
    "NotReplicated": "antre.errors",
    "PayloadTooLarge": "antre.errors",
    "Permanent": "antre.errors",
    "Queue": "antre.client",
    "QueueSettings": "antre.settings",
    "RedisRefused": "antre.errors",
    "RedisUnavailable": "antre.errors",
    "Retry": "antre.errors",
    "WorkerEntry": "antre.protocol.workers",
    "WorkerSettings": "antre.settings",
    "default_registry": "antre.handlers",
    "handler": "antre.handlers",
}

__all__ = [
    "AntreError",
    "AsyncQueue",
    "Backoff",
    "Depth",
    "EnqueueResult",
    "HandlerRegistry",
    "IdempotencyConflict",
    "InvalidArgument",
    "Job",
    "JobBusy",
    "JobInfo",
    "JobNotFound",
    "JobStatus",
    "LeaseLost",
    "NewJob",
    "NotReplicated",
    "PayloadTooLarge",
    "Permanent",
    "Queue",
    "QueueSettings",
    "RedisRefused",
    "RedisUnavailable",
    "Retry",
    "WorkerEntry",
    "WorkerSettings",
    "default_registry",
    "handler",
]


if not TYPE_CHECKING:  # type checkers see the imports above, and flag misspelt names

    def __getattr__(name: str) -> object:
        home = _HOMES.get(name)
        if home is None:
            # A submodule (antre.errors after a bare `import antre`), as eager imports gave it.
            try:
                return importlib.import_module(f"antre.{name}")
            except ModuleNotFoundError as exc:
                if exc.name != f"antre.{name}":
                    raise
                raise AttributeError(f"module 'antre' has no attribute {name!r}") from None
        value = getattr(importlib.import_module(home), name)
        globals()[name] = value
        return value

    def __dir__() -> list[str]:
        return sorted([*globals(), *_HOMES])
