"""Reporting how a run ended: one lifecycle log line and the per-type metrics, in one place for
the worker and its ack batcher."""

from __future__ import annotations

import logging

from antre import logs
from antre.metrics import WorkerMetrics
from antre.runs import Run

#: Lifecycle event names of the outcomes whose name differs.
_EVENTS = {"succeeded": "acked", "retried": "retrying"}


class Outcomes:
    def __init__(self, queue_name: str, worker_id: str, metrics: WorkerMetrics | None) -> None:
        self.queue_name = queue_name
        self.worker_id = worker_id
        self.metrics = metrics
        #: Runs acknowledged by this process.
        self.succeeded = 0

    def record(self, run: Run, outcome: str, *, error: str | None = None,
               level: int = logging.INFO, acked_at_ms: int | None = None) -> None:
        """``acked_at_ms``: the Redis clock at the ack, for the end-to-end latency (both ends
        on the clock that stamped created_at)."""
        claimed = run.claimed
        if outcome == "succeeded":
            self.succeeded += 1
        if self.metrics is not None:
            self.metrics.outcome(claimed.type, outcome)
            if acked_at_ms is not None:
                self.metrics.observe_latency(claimed.type,
                                             max(acked_at_ms - claimed.created_at_ms, 0) / 1000)
        if outcome == "lease_lost":
            level = logging.WARNING
        logs.job_event(_EVENTS.get(outcome, outcome), claimed, worker_id=self.worker_id,
                       level=level, duration_ms=run.elapsed_ms,
                       **({"error": error} if error else {}))
