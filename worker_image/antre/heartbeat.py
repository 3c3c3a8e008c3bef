"""The heartbeat loop: every visibility_timeout/3 it extends the leases this worker holds and
refreshes its registry entry, in one script call (:mod:`antre.protocol.extend_lease`)."""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from collections.abc import Callable
from typing import Any

from antre.metrics import WorkerMetrics
from antre.protocol import scripts
from antre.protocol.extend_lease import ExtendResult, extend_lease_op
from antre.protocol.scripts import Lease
from antre.settings import QueueSettings, WorkerSettings

log = logging.getLogger("antre.heartbeat")


class Heartbeat:
    def __init__(self, redis: Any, queue: QueueSettings, settings: WorkerSettings, *,
                 worker_id: str, held_leases: Callable[[], list[Lease]],
                 on_lost: Callable[[str, int], None],
                 registry_entry: Callable[[], dict[str, Any]],
                 metrics: WorkerMetrics | None = None) -> None:
        self.redis = redis
        self.queue = queue
        self.settings = settings
        self.worker_id = worker_id
        self.held_leases = held_leases
        self.on_lost = on_lost
        self.registry_entry = registry_entry
        self.metrics = metrics
        # Registry entries are read by the operator to pick idle pods: beat at least every 5 s.
        self.interval_s = min(settings.heartbeat_interval_s, 5.0)
        self.registry_ttl_ms = int(max(self.interval_s * 3, 10.0) * 1000)

    async def step(self) -> ExtendResult:
        leases = self.held_leases()
        result = await scripts.run_async(self.redis, extend_lease_op(
            self.queue, leases, lease_ms=self.settings.lease_ms, worker_id=self.worker_id,
            registry_entry_json=json.dumps(self.registry_entry(), separators=(",", ":")),
            registry_ttl_ms=self.registry_ttl_ms,
        ))
        extended = 0
        for (job_id, token), held in zip(leases, result.held, strict=True):
            if held:
                extended += 1
            else:
                # The token travels along: by the time this reply arrives the job may hold a
                # newer lease in this worker, which must not be touched.
                self.on_lost(job_id, token)
        if self.metrics is not None and extended:
            self.metrics.lease_extensions.labels(self.queue.name).inc(extended)
        return result

    async def unregister(self) -> None:
        """Removes the registry entry at once (a graceful stop), instead of waiting for its TTL."""
        with contextlib.suppress(Exception):
            pipe = self.redis.pipeline(transaction=False)
            pipe.delete(self.queue.keys.worker(self.worker_id))
            pipe.zrem(self.queue.keys.workers, self.worker_id)
            await pipe.execute()

    async def run(self) -> None:
        failures = 0
        while True:
            try:
                await self.step()
            except Exception as exc:  # outage, or Redis refusing for a while: keep going
                # The leases may run out while Redis is away; the reaper then requeues them
                # and the late settle calls are refused, so nothing runs twice unchecked.
                failures += 1
                if failures == 1:  # once per outage, not every second of it
                    log.warning("heartbeat failed; retrying", extra={"error": str(exc)})
                if self.metrics is not None:
                    self.metrics.redis_errors.labels(self.queue.name, "heartbeat").inc()
                await asyncio.sleep(min(self.interval_s, 1.0))
                continue
            if failures:
                log.info("heartbeat recovered", extra={"failed_beats": failures})
                failures = 0
            await asyncio.sleep(self.interval_s)
