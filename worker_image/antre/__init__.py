"""antre: a reliable Redis job queue.

Producers use :class:`Queue` / :class:`AsyncQueue`; handler modules use :func:`handler`,
:class:`Job`, :class:`Retry` and :class:`Permanent`; ``antre worker`` runs them.
"""

from antre.backoff import Backoff
from antre.client import AsyncQueue, Queue
from antre.errors import (
    AntreError,
    InvalidArgument,
    JobBusy,
    JobNotFound,
    LeaseLost,
    NotReplicated,
    PayloadTooLarge,
    Permanent,
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

__all__ = [
    "AntreError",
    "AsyncQueue",
    "Backoff",
    "Depth",
    "EnqueueResult",
    "HandlerRegistry",
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
    "RedisUnavailable",
    "Retry",
    "WorkerEntry",
    "WorkerSettings",
    "default_registry",
    "handler",
]
