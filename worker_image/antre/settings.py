"""Settings of a queue (shared by producers and workers) and of a worker process.

Frozen dataclasses with the unit in every name. Each setting is declared once, with its
environment variable, flag, bounds and help text in the field's metadata (:mod:`antre.fields`);
validation, ``from_env``, the command line's options, the operator's env entries and the docs
tables are derived from it. Every bad value is reported with its name and what is allowed.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from antre import fields, keys, limits
from antre.backoff import Backoff
from antre.fields import nested, setting

DAY_S = 86_400.0


@dataclass(frozen=True, slots=True)
class QueueSettings:
    name: str = setting(
        "default", env="ANTRE_QUEUE", flag="--queue", label="queue",
        validate=keys.validate_queue_name,
        help="queue name; it becomes the Redis Cluster hash tag of every key of the queue")
    prefix: str = setting(
        keys.DEFAULT_PREFIX, env="ANTRE_PREFIX", flag="--prefix", validate=keys.validate_prefix,
        help="first part of every key, to share one Redis between deployments")
    max_attempts: int = setting(
        5, env="ANTRE_MAX_ATTEMPTS", minimum=1, maximum=limits.MAX_ATTEMPTS,
        help="runs a job enqueued without max_attempts gets before it is dead-lettered (a lost "
             "lease counts as one); stored in each job at enqueue")
    done_ttl_s: float = setting(
        DAY_S, env="ANTRE_DONE_TTL", minimum=0, maximum=limits.MAX_TTL_S,
        help="seconds the record of a finished (done or cancelled) job is kept; 0 deletes it "
             "at ack (the cheapest path)")
    # Redis refuses a zero expiry, and a key that never dedupes is no idempotency key.
    idempotency_ttl_s: float = setting(
        DAY_S, env="ANTRE_IDEMPOTENCY_TTL", minimum=0.001,
        maximum=limits.MAX_TTL_S,
        help="unused, accepted so existing configurations stay valid: a key deduplicates for as "
             "long as its job is live, then for the idempotency done TTL")
    idempotency_done_ttl_s: float = setting(
        DAY_S, env="ANTRE_IDEMPOTENCY_DONE_TTL", minimum=0.001,
        maximum=limits.MAX_TTL_S,
        help="seconds a completed idempotency key turns re-runs into duplicates")
    dead_ttl_s: float = setting(
        30 * 86_400, env="ANTRE_DEAD_TTL", minimum=0,  # an int, so the docs say 2592000
        maximum=limits.MAX_TTL_S,
        help="seconds a dead letter is kept before the reaper deletes it (with its idempotency "
             "key); 0 keeps dead letters forever")
    max_payload_bytes: int = setting(
        256 * 1024, env="ANTRE_MAX_PAYLOAD_BYTES", minimum=1,
        maximum=limits.MAX_BYTES,
        help="largest encoded payload enqueue accepts, headers included, in bytes")
    durable_replicas: int = setting(
        0, env="ANTRE_DURABLE_REPLICAS", minimum=0, maximum=100,
        help="replicas that must confirm each enqueue, claim, lease renewal, ack, checkpoint, "
             "cancel and replay (Redis WAIT, in the same round trip) before it counts; 0: "
             "Redis's asynchronous replication, where a failover can lose the last writes")
    durable_timeout_s: float = setting(
        1.0, env="ANTRE_DURABLE_TIMEOUT", minimum=0.001,
        maximum=limits.MAX_DURABLE_TIMEOUT_S,
        help="seconds a durable write waits for those confirmations; then an enqueue raises "
             "NotReplicated and the worker gives the claim back or retries the ack")

    def __post_init__(self) -> None:
        fields.check(self)

    @property
    def keys(self) -> keys.QueueKeys:
        return keys.of_queue(self.name, self.prefix)

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None, **overrides: object) -> QueueSettings:
        """Settings from the ``ANTRE_*`` variables (os.environ by default); keyword arguments
        win over them. A bad value raises InvalidArgument naming the variable."""
        return queue_settings_from_env(env, **overrides)


@dataclass(frozen=True, slots=True)
class WorkerSettings:
    concurrency: int = setting(
        16, env="ANTRE_CONCURRENCY", flag="--concurrency", minimum=1, maximum=10_000,
        help="jobs one worker process runs at once")
    prefetch: int | None = setting(
        None, env="ANTRE_PREFETCH", flag="--prefetch", minimum=0, maximum=10_000,
        help="most jobs leased ahead of free slots, each started the moment a slot frees "
             "(leased and renewed like running jobs; a stop gives them back unstarted); the "
             "worker holds what finishes during two claim round trips (none for jobs much "
             "longer than a round trip: jobs held when the work turns long go back to the head "
             "of the queue unstarted, attempt refunded, within a few round trips, at least 50 "
             "ms), at most this; none: the concurrency; 0: claim only for free slots")
    visibility_timeout_s: float = setting(
        30.0, env="ANTRE_VISIBILITY_TIMEOUT", flag="--visibility-timeout", minimum=1,
        maximum=limits.MAX_WAIT_S,
        help="lease length in seconds: a job whose worker stops heartbeating is requeued this "
             "long after; the heartbeat extends it every third of it")
    job_timeout_s: float | None = setting(
        None, env="ANTRE_JOB_TIMEOUT", flag="--job-timeout", minimum=0.001,
        maximum=limits.MAX_RUN_S,
        help="longest single run in seconds before it fails and is retried (separate from the "
             "lease); none: no limit")
    backoff: Backoff = nested(Backoff, help="default retry delays; a handler can set its own")
    grace_period_s: float = setting(
        25.0, env="ANTRE_GRACE_PERIOD", flag="--grace-period", minimum=0,
        maximum=limits.MAX_WAIT_S,
        help="on SIGTERM, seconds running jobs may finish before they are released to the queue")
    reaper_interval_s: float = setting(
        5.0, env="ANTRE_REAPER_INTERVAL", flag="--reaper-interval", minimum=0.05,
        maximum=limits.MAX_WAIT_S,
        help="seconds between in-process reaper passes (one process at a time per queue)")
    lock_defer_s: float = setting(
        1.0, env="ANTRE_LOCK_DEFER", flag="--lock-defer", minimum=0.001,
        maximum=limits.MAX_WAIT_S,
        help="seconds a job waits when its resource is locked by another job")
    lock_max_deferrals: int = setting(
        600, env="ANTRE_LOCK_MAX_DEFERRALS", flag="--lock-max-deferrals", minimum=0,
        maximum=limits.MAX_LOCK_DEFERRALS,
        help="waits for a busy resource before the job is dead-lettered")
    metrics_port: int | None = setting(
        None, env="ANTRE_METRICS_PORT", flag="--metrics-port", minimum=0, maximum=65535,
        help="serve /metrics (Prometheus) and /healthz on this port (503 once a worker loop "
             "died, or once every slot is held by a handler thread past its job timeout; the "
             "body says which); none: off")
    pod_name: str | None = setting(
        None, env="POD_NAME",
        help="name in the worker registry (the operator uses it to scale down idle pods "
             "first); none: the host name")

    def __post_init__(self) -> None:
        fields.check(self)

    @property
    def lease_ms(self) -> int:
        return int(self.visibility_timeout_s * 1000)

    @property
    def prefetch_jobs(self) -> int:
        """The most jobs claimed beyond the free slots (``prefetch``, or its default)."""
        return self.concurrency if self.prefetch is None else self.prefetch

    @property
    def heartbeat_interval_s(self) -> float:
        return self.visibility_timeout_s / 3

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> WorkerSettings:
        """Settings from the ``ANTRE_*`` variables (os.environ by default)."""
        return worker_settings(fields.values_from_env(cls, os.environ if env is None else env))


def worker_settings(values: Mapping[str, Any]) -> WorkerSettings:
    """WorkerSettings from ``{path: value}`` (:mod:`antre.fields`). A backoff base above the
    default cap raises the cap with it, so ``--backoff-base 600`` alone is not an error."""
    values = dict(values)
    if "backoff.base_s" in values and "backoff.max_s" not in values:
        values["backoff.max_s"] = max(Backoff().max_s, values["backoff.base_s"])
    return fields.build(WorkerSettings, values)


def queue_settings_from_env(env: Mapping[str, str] | None = None, **overrides: object) -> QueueSettings:
    values = fields.values_from_env(QueueSettings, os.environ if env is None else env)
    values.update({k: v for k, v in overrides.items() if v is not None})
    return QueueSettings(**values)
