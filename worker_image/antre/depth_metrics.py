"""Queue depth as Prometheus metrics: a Collector over :meth:`antre.Queue.stats`.

The per-run metrics (outcomes, durations, latencies) are counted where they happen, in
:mod:`antre.metrics`; depth, oldest-job age, live workers and the queue-wide counters kept in Redis
(including lock contention) are *read* from Redis, so every process that exposes them (the API,
each worker) reports the same values: aggregate them with ``max by (queue)``, never ``sum``.

Two ways to feed the collector:

- a sync :class:`antre.Queue` given at construction is read on every scrape (the scraping thread
  blocks for one round trip; fine for a process without an event loop);
- asyncio processes call :meth:`DepthCollector.refresh` (the API does it before each /metrics
  answer) or run :meth:`DepthCollector.refresh_loop`, and each scrape reports the last reading.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Iterator, Sequence
from typing import Final

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from antre import client, errors
from antre.protocol.depth import Depth

log = logging.getLogger("antre.metrics")

#: Counters of the queue's stats hash that become ``antre_queue_events_total{event=...}``.
EVENTS: Final = ("enqueued", "done", "retried", "dead", "duplicate", "lock_deferred",
                 "lease_expired", "released", "handed_back", "replayed", "purged", "cancelled",
                 "dead_expired")

_UNREACHABLE = (errors.RedisUnavailable, ConnectionError, TimeoutError)


def depth_states(depth: Depth) -> dict[str, int]:
    """Jobs by state as the ``state`` label of ``antre_queue_jobs``."""
    return {"ready": depth.ready, "processing": depth.processing,
            "expired_lease": depth.expired_leases, "retry": depth.scheduled,
            "retry_due": depth.due, "dead": depth.dead}


class DepthCollector(Collector):
    def __init__(self, sync_queues: Sequence[client.Queue] = ()) -> None:
        self._sync_queues = list(sync_queues)
        #: Last successful reading per queue name, and whether the last attempt succeeded.
        self._depths: dict[str, Depth] = {}
        self._up: dict[str, bool] = {}
        self._stopping = asyncio.Event()

    def update(self, queue: str, depth: Depth | None) -> None:
        """Records one reading; ``None`` marks the queue unreadable (the last depth is dropped,
        so dashboards show a gap rather than a stale number)."""
        self._up[queue] = depth is not None
        if depth is None:
            self._depths.pop(queue, None)
        else:
            self._depths[queue] = depth

    async def refresh(self, queues: Sequence[client.AsyncQueue]) -> None:
        readings = await asyncio.gather(*(q.stats() for q in queues), return_exceptions=True)
        for queue, reading in zip(queues, readings, strict=True):
            if isinstance(reading, Depth):
                self.update(queue.name, reading)
            else:
                if not isinstance(reading, _UNREACHABLE):
                    log.warning("depth read failed", extra={"queue": queue.name,
                                                            "error": repr(reading)})
                self.update(queue.name, None)

    async def refresh_loop(self, queues: Sequence[client.AsyncQueue], interval_s: float = 5.0) -> None:
        """Reads every ``interval_s`` until :meth:`stop` (or cancellation). The stop flag makes
        the loop end even if a cancellation is swallowed inside a Redis call."""
        while not self._stopping.is_set():
            await self.refresh(queues)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._stopping.wait(), interval_s)

    def stop(self) -> None:
        self._stopping.set()

    def _read_sync(self) -> None:
        for queue in self._sync_queues:
            try:
                self.update(queue.name, queue.stats())
            except _UNREACHABLE:
                self.update(queue.name, None)

    def collect(self) -> Iterator[Metric]:
        self._read_sync()
        jobs = GaugeMetricFamily("antre_queue_jobs", "Jobs in the queue by state (read from Redis)",
                                 labels=["queue", "state"])
        oldest = GaugeMetricFamily("antre_queue_oldest_ready_age_seconds",
                                   "How long the next job to be claimed has waited (0 when none)",
                                   labels=["queue"])
        workers = GaugeMetricFamily("antre_queue_workers", "Workers with a live registry entry",
                                    labels=["queue"])
        events = CounterMetricFamily("antre_queue_events", "Queue-wide lifecycle counters kept "
                                     "in Redis, all processes together", labels=["queue", "event"])
        contention = CounterMetricFamily("antre_lock_contention", "Claims deferred because the "
                                         "job's resource lock was held", labels=["queue"])
        up = GaugeMetricFamily("antre_queue_depth_up", "1 when the last depth read succeeded",
                               labels=["queue"])
        for name, ok in sorted(self._up.items()):
            up.add_metric([name], 1.0 if ok else 0.0)
        for name, depth in sorted(self._depths.items()):
            for state, value in depth_states(depth).items():
                jobs.add_metric([name, state], value)
            oldest.add_metric([name], depth.oldest_ready_age_s or 0.0)
            workers.add_metric([name], depth.workers)
            for event in EVENTS:
                events.add_metric([name, event], depth.counters.get(event, 0))
            contention.add_metric([name], depth.counters.get("lock_deferred", 0))
        yield from (jobs, oldest, workers, events, contention, up)
