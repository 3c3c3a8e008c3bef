"""Reporting how a run ended: the lifecycle log and the per-type metrics, in one place for the
worker and its ack batcher.

A failed, released or lost run gets a log line of its own. A successful one (``acked``) is logged
at DEBUG: at thousands of jobs per second a line per job costs a third of the worker's CPU and
floods the log pipeline, so at INFO the worker writes a ``settled`` summary instead, at most one
every :data:`SUMMARY_INTERVAL_S` while jobs finish and one at shutdown, with the count of every
outcome since the last one. A prefetched job handed back unstarted (``handed_back``) is logged at
DEBUG too: hand-backs are routine whenever the work turns long, a job that never ran there has
nothing to investigate, and the summary counts them. Per-job metrics (Prometheus) count every
job either way.
"""

from __future__ import annotations

import collections
import logging
import time
from typing import TYPE_CHECKING, Final

from antre import logs
from antre.runs import Run

if TYPE_CHECKING:  # only a worker serving metrics imports prometheus_client
    from antre.metrics import WorkerMetrics

#: Lifecycle event names of the outcomes whose name differs.
_EVENTS = {"succeeded": "acked", "retried": "retrying"}
#: Outcomes logged one line per job only at DEBUG: frequent and expected (the ``settled``
#: summary counts them at INFO).
_ROUTINE: Final = frozenset({"succeeded", "handed_back"})
#: Seconds between two ``settled`` summary lines while jobs finish.
SUMMARY_INTERVAL_S: Final = 10.0


class Outcomes:
    def __init__(self, queue_name: str, worker_id: str, metrics: WorkerMetrics | None, *,
                 summary_interval_s: float = SUMMARY_INTERVAL_S) -> None:
        self.queue_name = queue_name
        self.worker_id = worker_id
        self.metrics = metrics
        #: Runs acknowledged by this process.
        self.succeeded = 0
        self.summary_interval_s = summary_interval_s
        #: Lifecycle events since the last summary line, by name.
        self._since_summary: collections.Counter[str] = collections.Counter()
        self._summary_at = time.monotonic()

    def record(self, run: Run, outcome: str, *, error: str | None = None,
               level: int = logging.INFO, acked_at_ms: int | None = None) -> None:
        """``acked_at_ms``: the Redis clock at the ack, for the end-to-end latency (both ends
        on the clock that stamped created_at)."""
        claimed = run.claimed
        event = _EVENTS.get(outcome, outcome)
        if outcome == "succeeded":
            self.succeeded += 1
        if outcome in _ROUTINE:
            level = logging.DEBUG
        elif outcome == "lease_lost":
            level = logging.WARNING
        if self.metrics is not None:
            self.metrics.outcome(claimed.type, outcome)
            if acked_at_ms is not None:
                self.metrics.observe_latency(claimed.type,
                                             max(acked_at_ms - claimed.created_at_ms, 0) / 1000)
        logs.job_event(event, claimed, worker_id=self.worker_id, level=level,
                       duration_ms=run.elapsed_ms, **({"error": error} if error else {}))
        self._since_summary[event] += 1
        if time.monotonic() - self._summary_at >= self.summary_interval_s:
            self.log_summary()

    def log_summary(self) -> None:
        """The ``settled`` line: how many runs ended how since the last one; nothing when none."""
        now = time.monotonic()
        if self._since_summary and logs.lifecycle.isEnabledFor(logging.INFO):
            logs.lifecycle.info("settled", extra={
                "event": "settled", "worker_id": self.worker_id, "queue": self.queue_name,
                "interval_s": round(now - self._summary_at, 3), **self._since_summary})
        self._since_summary.clear()
        self._summary_at = now
