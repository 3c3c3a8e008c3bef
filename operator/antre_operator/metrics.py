"""The operator's own Prometheus metrics, one series per JobQueue, served on --metrics-port.

A private registry (not prometheus_client's global one), so two operators in one test process,
or a library that registers its own collectors, never collide. Series of a deleted JobQueue are
removed by :meth:`Metrics.forget`.
"""

from __future__ import annotations

import contextlib

import prometheus_client
from antre import metrics_server

_LABELS = ("namespace", "jobqueue")


class Metrics:
    def __init__(self) -> None:
        self.registry = prometheus_client.CollectorRegistry(auto_describe=True)
        gauge = prometheus_client.Gauge
        self.backlog = gauge("antre_operator_backlog", "Ready plus due jobs of the queue.",
                             _LABELS, registry=self.registry)
        self.processing = gauge("antre_operator_processing", "Jobs being processed.", _LABELS,
                                registry=self.registry)
        self.dead = gauge("antre_operator_dead", "Jobs in the dead-letter list.", _LABELS,
                          registry=self.registry)
        self.oldest_age = gauge("antre_operator_oldest_job_age_seconds",
                                "Age of the oldest ready job (0 when none).", _LABELS,
                                registry=self.registry)
        self.desired = gauge("antre_operator_desired_replicas",
                             "Worker replicas the operator decided on.", _LABELS,
                             registry=self.registry)
        self.current = gauge("antre_operator_current_replicas",
                             "Worker replicas of the Deployment before the decision.", _LABELS,
                             registry=self.registry)
        self.redis_up = gauge("antre_operator_redis_up",
                              "1 when the last depth read succeeded.", _LABELS,
                              registry=self.registry)
        self.errors = prometheus_client.Counter(
            "antre_operator_reconcile_errors", "Reconciles that failed, by reason.",
            (*_LABELS, "reason"), registry=self.registry)
        self.scales = prometheus_client.Counter(
            "antre_operator_scale_events", "Replica changes of worker Deployments.",
            (*_LABELS, "direction"), registry=self.registry)
        self._server: metrics_server.MetricsServer | None = None

    def forget(self, namespace: str, name: str) -> None:
        for gauge in (self.backlog, self.processing, self.dead, self.oldest_age, self.desired,
                      self.current, self.redis_up):
            with contextlib.suppress(KeyError):
                gauge.remove(namespace, name)
        for counter in (self.errors, self.scales):
            for labels in list(counter._metrics):
                if labels[:2] == (namespace, name):
                    counter.remove(*labels)

    async def serve(self, port: int, address: str = "0.0.0.0") -> None:
        """Serves /metrics on the operator's event loop, the way the worker serves its own."""
        self._server = await metrics_server.serve_metrics(self.registry, port=port, host=address)

    async def stop(self) -> None:
        if self._server is not None:
            await self._server.cleanup()
            self._server = None

    def render(self) -> str:
        return prometheus_client.generate_latest(self.registry).decode()
