"""Settings of a queue (shared by producers and workers) and of a worker process.

Frozen dataclasses with the unit in every name; ``from_env`` reads the ``ANTRE_*`` variables
the Kubernetes manifests set, and every bad value is reported with its name and what is allowed.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field

from antre import errors, keys
from antre.backoff import Backoff


@dataclass(frozen=True, slots=True)
class QueueSettings:
    name: str = "default"
    """Queue name; it becomes the Redis Cluster hash tag of every key of the queue."""
    prefix: str = keys.DEFAULT_PREFIX
    """First part of every key, to share one Redis between deployments."""
    max_attempts: int = 5
    """Runs a job gets by default before it is dead-lettered (a lost lease counts as one)."""
    done_ttl_s: float = 86_400.0
    """How long the record of a finished (done or cancelled) job is kept, in seconds."""
    idempotency_ttl_s: float = 86_400.0
    """How long an idempotency key deduplicates enqueues after the first, in seconds."""
    idempotency_done_ttl_s: float = 86_400.0
    """How long a completed key keeps turning re-runs into duplicates, in seconds."""
    max_payload_bytes: int = 256 * 1024
    """Largest encoded payload accepted by enqueue."""

    def __post_init__(self) -> None:
        keys.validate_queue_name(self.name)
        keys.validate_prefix(self.prefix)
        _check_int("max_attempts", self.max_attempts, minimum=1)
        _check_int("max_payload_bytes", self.max_payload_bytes, minimum=1)
        _check_number("done_ttl_s", self.done_ttl_s, minimum=0)
        # Redis refuses a zero expiry, and a key that never dedupes is no idempotency key.
        _check_number("idempotency_ttl_s", self.idempotency_ttl_s, minimum=0.001)
        _check_number("idempotency_done_ttl_s", self.idempotency_done_ttl_s, minimum=0.001)

    @property
    def keys(self) -> keys.QueueKeys:
        return keys.QueueKeys(self.name, self.prefix)

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None, **overrides: object) -> QueueSettings:
        """Settings from the ``ANTRE_*`` variables (os.environ by default); keyword arguments
        win over them. A bad value raises InvalidArgument naming the variable."""
        return queue_settings_from_env(env, **overrides)


@dataclass(frozen=True, slots=True)
class WorkerSettings:
    concurrency: int = 16
    """Jobs one worker process runs at once."""
    visibility_timeout_s: float = 30.0
    """Lease length: a job whose worker stops heartbeating is requeued this long after."""
    job_timeout_s: float | None = None
    """Longest a single run may take before it fails (and is retried); None = no limit."""
    backoff: Backoff = field(default_factory=Backoff)
    """Default retry delays; a handler can set its own."""
    grace_period_s: float = 25.0
    """On SIGTERM, how long running jobs may finish before they are released to the queue."""
    reaper_interval_s: float = 5.0
    """How often each worker runs a reaper pass (one process at a time per queue)."""
    lock_defer_s: float = 1.0
    """How long a job waits when its resource is locked by another job."""
    lock_max_deferrals: int = 600
    """Waits for a busy resource before the job is dead-lettered."""
    metrics_port: int | None = None
    """Port for /metrics and /healthz; None serves nothing."""
    pod_name: str | None = None
    """Name reported in the worker registry (POD_NAME, else the host name)."""

    def __post_init__(self) -> None:
        _check_int("concurrency", self.concurrency, minimum=1, maximum=10_000)
        _check_number("visibility_timeout_s", self.visibility_timeout_s, minimum=1)
        if self.job_timeout_s is not None:
            _check_number("job_timeout_s", self.job_timeout_s, minimum=0.001)
        _check_number("grace_period_s", self.grace_period_s, minimum=0)
        _check_number("reaper_interval_s", self.reaper_interval_s, minimum=0.05)
        _check_number("lock_defer_s", self.lock_defer_s, minimum=0.001)
        _check_int("lock_max_deferrals", self.lock_max_deferrals, minimum=0)
        if self.metrics_port is not None:
            _check_int("metrics_port", self.metrics_port, minimum=0, maximum=65535)

    @property
    def lease_ms(self) -> int:
        return int(self.visibility_timeout_s * 1000)

    @property
    def heartbeat_interval_s(self) -> float:
        return self.visibility_timeout_s / 3


def _check_int(name: str, value: object, *, minimum: int, maximum: int | None = None) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum or (
        maximum is not None and value > maximum
    ):
        allowed = f"an integer >= {minimum}" + (f" and <= {maximum}" if maximum is not None else "")
        raise errors.InvalidArgument(f"{name}: got {value!r}; must be {allowed}")


def _check_number(name: str, value: object, *, minimum: float) -> None:
    if isinstance(value, bool) or not isinstance(value, int | float) or not value >= minimum:
        raise errors.InvalidArgument(f"{name}: got {value!r}; must be a number >= {minimum}")


ENV_VARS = {
    "ANTRE_QUEUE": "queue name",
    "ANTRE_PREFIX": "key prefix",
    "ANTRE_MAX_ATTEMPTS": "max_attempts",
    "ANTRE_CONCURRENCY": "concurrency",
    "ANTRE_VISIBILITY_TIMEOUT": "visibility timeout, seconds",
    "ANTRE_JOB_TIMEOUT": "job timeout, seconds",
    "ANTRE_BACKOFF_BASE": "backoff base, seconds",
    "ANTRE_BACKOFF_MAX": "backoff cap, seconds",
    "ANTRE_GRACE_PERIOD": "graceful-shutdown period, seconds",
    "ANTRE_METRICS_PORT": "metrics port",
    "ANTRE_DONE_TTL": "how long finished records are kept, seconds",
    "ANTRE_IDEMPOTENCY_TTL": "how long an idempotency key dedupes enqueues, seconds",
    "ANTRE_IDEMPOTENCY_DONE_TTL": "how long a completed key turns re-runs into duplicates, seconds",
    "ANTRE_MAX_PAYLOAD_BYTES": "largest encoded payload, bytes",
    "ANTRE_LOCK_DEFER": "wait for a busy resource, seconds",
    "ANTRE_LOCK_MAX_DEFERRALS": "waits for a busy resource before dead-lettering",
}


def env_value(env: Mapping[str, str], name: str, kind: type[int] | type[float]) -> int | float | None:
    raw = env.get(name)
    if raw is None or raw.strip() == "":
        return None
    try:
        return kind(raw)
    except ValueError:
        wanted = "an integer" if kind is int else "a number"
        raise errors.InvalidArgument(f"{name}: got {raw!r}; must be {wanted}") from None


def queue_settings_from_env(env: Mapping[str, str] | None = None, **overrides: object) -> QueueSettings:
    env = os.environ if env is None else env
    values: dict[str, object] = {}
    if env.get("ANTRE_QUEUE"):
        values["name"] = env["ANTRE_QUEUE"]
    if env.get("ANTRE_PREFIX"):
        values["prefix"] = env["ANTRE_PREFIX"]
    for name, field_name, kind in _QUEUE_ENV:
        if (value := env_value(env, name, kind)) is not None:
            values[field_name] = value
    values.update({k: v for k, v in overrides.items() if v is not None})
    return QueueSettings(**values)  # type: ignore[arg-type]


#: Environment variables for the numeric queue settings: (variable, field, type).
_QUEUE_ENV: tuple[tuple[str, str, type[int] | type[float]], ...] = (
    ("ANTRE_MAX_ATTEMPTS", "max_attempts", int),
    ("ANTRE_DONE_TTL", "done_ttl_s", float),
    ("ANTRE_IDEMPOTENCY_TTL", "idempotency_ttl_s", float),
    ("ANTRE_IDEMPOTENCY_DONE_TTL", "idempotency_done_ttl_s", float),
    ("ANTRE_MAX_PAYLOAD_BYTES", "max_payload_bytes", int),
)
