"""Prometheus metrics of the worker (and the API), with prometheus-client.

Label children are cached per (type, outcome) so the per-job cost is a dict lookup and an add.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Final

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

_DURATION_BUCKETS = (0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300)
_LATENCY_BUCKETS = (0.005, 0.01, 0.05, 0.1, 0.5, 1, 5, 10, 30, 60, 300, 900, 3600)


#: The ``type`` label of every job type the worker has no handler for: any enqueuer can invent
#: types, and a label value per invented type would grow /metrics without bound.
UNKNOWN_TYPE: Final = "(unknown)"


class WorkerMetrics:
    def __init__(self, queue: str, registry: CollectorRegistry | None = None) -> None:
        self.queue = queue
        self.registry = registry or CollectorRegistry()
        #: Types reported under their own label; None reports every type as it is.
        self.known_types: frozenset[str] | None = None
        self.jobs = Counter(
            "antre_jobs_total", "Job runs by type and outcome (succeeded, retried, dead, "
            "lease_lost, duplicate, released, handed_back)", ["queue", "type", "outcome"],
            registry=self.registry)
        self.duration = Histogram(
            "antre_job_duration_seconds", "Handler run time", ["queue", "type"],
            buckets=_DURATION_BUCKETS, registry=self.registry)
        self.latency = Histogram(
            "antre_job_latency_seconds", "Enqueue to done, end to end", ["queue", "type"],
            buckets=_LATENCY_BUCKETS, registry=self.registry)
        self.lease_extensions = Counter(
            "antre_lease_extensions_total", "Lease extensions by the heartbeat", ["queue"],
            registry=self.registry)
        self.reaper_requeued = Counter(
            "antre_reaper_requeued_total", "Expired leases requeued or dead-lettered by this "
            "process's reaper passes", ["queue"], registry=self.registry)
        self.reaper_promoted = Counter(
            "antre_reaper_promoted_total", "Due retries promoted by this process's reaper passes",
            ["queue"], registry=self.registry)
        self.stuck_threads = Gauge(
            "antre_worker_stuck_threads", "Handler threads still running past their job "
            "timeout, each holding a concurrency slot (and its resource lock) until it returns",
            ["queue"], registry=self.registry)
        self.redis_errors = Counter(
            "antre_redis_errors_total", "Redis calls that failed (the worker retries them)",
            ["queue", "operation"], registry=self.registry)
        self._outcomes: dict[tuple[str, str], Counter] = {}
        self._durations: dict[str, Histogram] = {}
        self._latencies: dict[str, Histogram] = {}

    def limit_types(self, known_types: Iterable[str]) -> None:
        """Reports types outside ``known_types`` (the worker's handlers) as one label value."""
        self.known_types = frozenset(known_types)

    def _label(self, job_type: str) -> str:
        if self.known_types is None or job_type in self.known_types:
            return job_type
        return UNKNOWN_TYPE

    def outcome(self, job_type: str, outcome: str) -> None:
        job_type = self._label(job_type)
        child = self._outcomes.get((job_type, outcome))
        if child is None:
            child = self._outcomes[(job_type, outcome)] = self.jobs.labels(self.queue, job_type, outcome)
        child.inc()

    def observe(self, job_type: str, duration_s: float) -> None:
        """A handler's run time."""
        job_type = self._label(job_type)
        hist = self._durations.get(job_type)
        if hist is None:
            hist = self._durations[job_type] = self.duration.labels(self.queue, job_type)
        hist.observe(duration_s)

    def observe_latency(self, job_type: str, latency_s: float) -> None:
        """Enqueue to ack, both on the Redis clock."""
        job_type = self._label(job_type)
        lat = self._latencies.get(job_type)
        if lat is None:
            lat = self._latencies[job_type] = self.latency.labels(self.queue, job_type)
        lat.observe(latency_s)
