"""The heartbeat loop: every visibility_timeout/3 it extends the leases this worker holds and
the resource locks it keeps for handlers still going after their job was settled, and refreshes
its registry entry, in one script call (:mod:`antre.protocol.extend_lease`). A renewal answered
after some of its runs were abandoned at their deadline has the leases it kept for them given
back (:mod:`antre.late_renewals`)."""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from antre.errors import NotReplicated
from antre.held_runs import HeldRuns
from antre.protocol import scripts
from antre.protocol.extend_lease import ExtendResult, KeptLock, extend_lease_ops, merged
from antre.runs import Run
from antre.settings import QueueSettings, WorkerSettings

if TYPE_CHECKING:  # only a worker serving metrics imports prometheus_client
    from antre.metrics import WorkerMetrics

log = logging.getLogger("antre.heartbeat")


def registry_ttl_ms(interval_s: float, lease_ms: int) -> int:
    """How long a worker's registry entry outlives its last beat: three beats (at least 10 s),
    and never less than a lease plus a beat. The claim refuses a worker whose last beat is
    older than its lease (a claim that reached Redis late, from a process frozen or cut off),
    and it finds that beat in the registry only while the entry lasts: the reaper prunes a
    worker whose entry expired."""
    return int(max(interval_s * 3, 10.0, lease_ms / 1000 + interval_s) * 1000)


class Heartbeat:
    def __init__(self, redis: Any, queue: QueueSettings, settings: WorkerSettings, *,
                 worker_id: str, held: HeldRuns,
                 kept_locks: Callable[[], list[KeptLock]],
                 registry_entry: Callable[[], dict[str, Any]],
                 give_back: Callable[[Sequence[Run]], None],
                 metrics: WorkerMetrics | None = None) -> None:
        self.redis = redis
        self.queue = queue
        self.settings = settings
        self.worker_id = worker_id
        self.held = held
        #: The resource locks kept for handlers still going (Settler.kept_locks).
        self.kept_locks = kept_locks
        self.registry_entry = registry_entry
        #: Gives back the runs abandoned at their deadline whose lease a renewal kept.
        self.give_back = give_back
        self.metrics = metrics
        # Registry entries are read by the operator to pick idle pods: beat at least every 5 s.
        self.interval_s = min(settings.heartbeat_interval_s, 5.0)
        self.registry_ttl_ms = registry_ttl_ms(self.interval_s, settings.lease_ms)
        self._beat_landed = asyncio.Event()
        self._beat_wanted = asyncio.Event()

    async def step(self) -> ExtendResult:
        runs = self.held.renewing()
        sent_at = time.monotonic()
        held: list[bool] | None = None  # Redis's answer, per run; None if none came
        try:
            result, unconfirmed = await self._renew(runs, sent_at)
            held = result.held
        finally:
            # A lease held for a run abandoned meanwhile goes back to the queue now instead of
            # staying leased, to nobody, for a whole lease; an outage gives nothing back.
            given_back = self.held.renewal_answered(runs, held, sent_at=sent_at)
            if given_back:
                self.give_back(given_back)
        if unconfirmed is not None:
            raise unconfirmed
        return result

    async def _renew(self, runs: Sequence[Run],
                     sent_at: float) -> tuple[ExtendResult, NotReplicated | None]:
        """One beat: Redis's answers, and the error of a call the replicas did not confirm."""
        leases = [run.lease for run in runs]
        kept = self.kept_locks()
        unconfirmed: NotReplicated | None = None
        results: list[ExtendResult] = []
        for op in extend_lease_ops(
                self.queue, leases, lease_ms=self.settings.lease_ms, worker_id=self.worker_id,
                registry_entry_json=json.dumps(self.registry_entry(), separators=(",", ":")),
                registry_ttl_ms=self.registry_ttl_ms, kept_locks=kept):
            try:
                results.append(await scripts.run_async(self.redis, op))
            except NotReplicated as exc:
                # Too few replicas have the renewal (durable_replicas): a failover could undo
                # it, so the runs keep the deadline of their last confirmed renewal. Losses it
                # found still count.
                assert isinstance(exc.result, ExtendResult)
                results.append(exc.result)
                unconfirmed = exc
        self._beat_landed.set()
        result = merged(results)
        renewed = [lease for lease, held in zip(leases, result.held, strict=True) if held]
        if unconfirmed is None:
            self.held.renewed(renewed, sent_at=sent_at)
        for (job_id, token), held in zip(leases, result.held, strict=True):
            if not held:
                # The token travels along: by the time this reply arrives the job may hold a
                # newer lease in this worker, which must not be touched.
                self.held.lose(job_id, token)
        # A handler that ended while this beat was on its way has had its lock freed: that
        # lock is not reported lost.
        lost = [lock for lock, held in zip(kept, result.kept, strict=True) if not held]
        still_kept = set(self.kept_locks()) if lost else set()
        for resource_key, holder in lost:
            if (resource_key, holder) in still_kept:
                log.warning("a resource lock kept for a handler still going was taken by another job",
                            extra={"resource_key": resource_key, "holder": holder})
        if unconfirmed is None and self.metrics is not None and renewed:
            self.metrics.lease_extensions.labels(self.queue.name).inc(len(renewed))
        return result, unconfirmed

    async def beat_now(self, timeout_s: float) -> None:
        """Has the loop beat at once instead of at its interval, and waits until a beat has
        reached Redis (or ``timeout_s`` passed)."""
        self._beat_landed.clear()
        self._beat_wanted.set()
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._beat_landed.wait(), timeout_s)

    async def unregister(self) -> None:
        """Removes the registry entry at once (a graceful stop), instead of waiting for its TTL."""
        with contextlib.suppress(Exception):
            pipe = self.redis.pipeline(transaction=False)
            pipe.delete(self.queue.keys.worker(self.worker_id))
            pipe.zrem(self.queue.keys.workers, self.worker_id)
            pipe.zrem(self.queue.keys.field_readers, self.worker_id)
            await pipe.execute()

    async def run(self) -> None:
        failures = 0
        if self._beat_landed.is_set():  # the worker's start beat already: the next is due later
            await self._pause()
        while True:
            try:
                await self.step()
            except Exception as exc:  # outage, or Redis refusing for a while: keep going
                # Runs whose lease is not renewed in time are abandoned at their own deadline
                # (HeldRuns); the reaper requeues their jobs once Redis answers again.
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
            await self._pause()

    async def _pause(self) -> None:
        """The interval between beats, cut short by :meth:`beat_now`."""
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._beat_wanted.wait(), self.interval_s)
        self._beat_wanted.clear()
