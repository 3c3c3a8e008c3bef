"""The worker runtime: the claim loop and the run of one job, with the heartbeat, the reaper
and the ack batcher beside it in their own modules; graceful shutdown.

One asyncio loop per process runs up to ``concurrency`` handlers. Jobs are claimed in batches
(one script call leases as many as there are free slots) and acknowledged in batches
(:mod:`antre.ack_batcher`); an empty queue is waited on with a blocking BLMOVE that rotates the
list onto itself, so a new job wakes the worker at once without ever leaving the ready list.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import secrets
import socket
import time
from typing import Any

from antre import logs, queue_registry, redis_checks, tracing
from antre.ack_batcher import AckBatcher
from antre.errors import LeaseLost, Permanent, RedisUnavailable, Retry
from antre.handler_threads import HandlerThreads, ThreadTimeout
from antre.handlers import Handler, HandlerRegistry
from antre.heartbeat import Heartbeat
from antre.held_runs import HeldRuns
from antre.jobs import ClaimedJob, Job
from antre.metrics import WorkerMetrics
from antre.outages import Outages
from antre.outcomes import Outcomes
from antre.protocol import scripts
from antre.protocol.checkpoint import checkpoint_op
from antre.protocol.claim import claim_op
from antre.protocol.fail import fail_op
from antre.protocol.release import release_op
from antre.reaper import Reaper
from antre.runs import Failure, Run
from antre.settings import QueueSettings, WorkerSettings

log = logging.getLogger("antre.worker")

#: Longest blocking wait on an empty queue; bounds how late a due retry or a stop is noticed.
IDLE_WAIT_S = 1.0


def _headers(headers_json: str) -> dict[str, str]:
    """The job's headers; anything but a JSON object of strings (a foreign producer's mistake)
    is ignored rather than failing the job."""
    if not headers_json:
        return {}
    try:
        decoded = json.loads(headers_json)
    except ValueError:
        return {}
    if not isinstance(decoded, dict):
        return {}
    return {str(key): str(value) for key, value in decoded.items()}


def default_worker_id() -> str:
    return f"{socket.gethostname()}-{os.getpid()}-{secrets.token_hex(3)}"


class Worker:
    def __init__(self, redis: Any, queue: QueueSettings, settings: WorkerSettings,
                 handlers: HandlerRegistry, *, worker_id: str | None = None,
                 metrics: WorkerMetrics | None = None) -> None:
        self.redis = redis
        self.queue = queue
        self.settings = settings
        self.handlers = handlers
        self.worker_id = worker_id or default_worker_id()
        self.metrics = metrics
        self.pod = settings.pod_name or os.environ.get("POD_NAME") or socket.gethostname()
        self.started_at_ms = int(time.time() * 1000)
        self._running = 0
        self._slot_freed = asyncio.Event()
        self._stopping = asyncio.Event()
        self._idle_wait: asyncio.Task[Any] | None = None
        self._loops: list[asyncio.Task[Any]] = []
        self._loop: asyncio.AbstractEventLoop | None = None
        self.outages = Outages(redis, queue_name=queue.name, worker_id=self.worker_id,
                               metrics=metrics)
        self.outcomes = Outcomes(queue.name, self.worker_id, metrics)
        self.held = HeldRuns(self.outcomes)
        self.threads = HandlerThreads(settings.concurrency, on_slot_freed=self._slot_freed.set)
        self.acks = AckBatcher(queue, worker_id=self.worker_id, outages=self.outages,
                               outcomes=self.outcomes, budget_s=settings.visibility_timeout_s,
                               on_settled=self.held.forget)
        self.heartbeat = Heartbeat(
            redis, queue, settings, worker_id=self.worker_id, held_leases=self.held.leases,
            on_lost=self.held.lose, registry_entry=self._registry_entry, metrics=metrics)
        self.reaper = Reaper(redis, queue, interval_s=settings.reaper_interval_s,
                             holder=self.worker_id, metrics=metrics)

    # -- lifecycle -------------------------------------------------------------------------

    def stop(self) -> None:
        """Begins a graceful shutdown (what SIGTERM does); ``run`` returns when it is over."""
        self._stopping.set()
        self._slot_freed.set()
        if self._idle_wait is not None:
            self._idle_wait.cancel()

    @property
    def in_flight(self) -> int:
        return len(self.held)

    @property
    def succeeded(self) -> int:
        """Runs this worker has acknowledged."""
        return self.outcomes.succeeded

    def healthy(self) -> bool:
        """For the liveness probe: False once one of the worker's loops has ended while the
        worker is not stopping (they only end on a defect; a restart is the cure)."""
        if self._stopping.is_set():
            return True
        return all(not task.done() for task in self._loops)

    async def run(self) -> None:
        self._loop = asyncio.get_running_loop()
        await self._check_redis()
        await queue_registry.register_async(self.redis, self.queue.prefix, self.queue.name)
        log.info("worker started", extra={
            "worker_id": self.worker_id, "queue": self.queue.name, "pod": self.pod,
            "concurrency": self.settings.concurrency, "handlers": self.handlers.names})
        with contextlib.suppress(Exception):  # Redis may be down; the loops retry
            await self.heartbeat.step()  # register at once, so the operator sees us
        claimer = asyncio.create_task(self._claim_loop(), name="antre-claim")
        background = [
            asyncio.create_task(self.acks.run(), name="antre-ack"),
            asyncio.create_task(self.heartbeat.run(), name="antre-heartbeat"),
            asyncio.create_task(self.reaper.run(), name="antre-reaper"),
        ]
        self._loops = [claimer, *background]
        try:
            await self._stopping.wait()
            await claimer
            await self._drain()
        finally:
            claimer.cancel()
            for task in background:
                task.cancel()
            # A task can swallow a cancellation that lands inside a redis-py call: ask again.
            while not all(task.done() for task in (claimer, *background)):
                await asyncio.wait([claimer, *background], timeout=0.2)
                for task in background:
                    task.cancel()
            await asyncio.gather(claimer, *background, return_exceptions=True)
            await self.heartbeat.unregister()
            self.threads.shutdown()
            log.info("worker stopped", extra={"worker_id": self.worker_id,
                                              "succeeded": self.succeeded})

    async def _check_redis(self) -> None:
        try:
            warning = await redis_checks.eviction_policy_warning(self.redis)
        except Exception as exc:  # INFO may be renamed on managed Redis; not fatal
            log.debug("could not read maxmemory-policy", extra={"error": str(exc)})
            return
        if warning:
            log.warning(warning, extra={"queue": self.queue.name})

    async def _drain(self) -> None:
        """Lets running jobs finish within the grace period, then releases the rest."""
        deadline = time.monotonic() + self.settings.grace_period_s
        while self._running and time.monotonic() < deadline:
            tasks = [run.task for run in self.held if run.task and not run.task.done()]
            if not tasks:
                break
            await asyncio.wait(tasks, timeout=max(deadline - time.monotonic(), 0))
        unfinished = [run for run in self.held
                      if run.task and not run.task.done() and not run.settling]
        if unfinished:
            for run in unfinished:
                run.released = True
            try:
                released = await self.outages.settle(release_op(
                    self.queue, [run.lease for run in unfinished], worker_id=self.worker_id,
                    reason="worker shutting down"), budget_s=5.0)
            except (RedisUnavailable, LeaseLost):
                released = [False] * len(unfinished)
            for run, ok in zip(unfinished, released, strict=True):
                if run.task is not None:
                    run.task.cancel()
                self.held.forget(run)
                self.outcomes.record(run, "released" if ok else "lease_lost")
        settling = [run.task for run in self.held if run.task and not run.task.done()]
        if settling:  # fail calls already under way: let them land
            await asyncio.wait(settling, timeout=10.0)
        await self.acks.flush()

    # -- claiming --------------------------------------------------------------------------

    async def _claim_loop(self) -> None:
        outages = 0
        while not self._stopping.is_set():
            free = self.settings.concurrency - self._running - self.threads.overdue
            if free <= 0:
                self._slot_freed.clear()
                await self._slot_freed.wait()
                continue
            try:
                # Never cancelled mid-call: a claim whose reply is lost would strand its jobs
                # until their leases expire.
                claim_ns = time.time_ns()
                result = await scripts.run_async(self.redis, claim_op(
                    self.queue, self.settings, worker_id=self.worker_id, max_jobs=free))
            except Exception as exc:  # an outage, or Redis refusing (LOADING, READONLY...)
                outages += 1
                await self.outages.wait("claim", exc, outages)
                continue
            if outages:
                log.info("redis reachable again", extra={"worker_id": self.worker_id})
                outages = 0
            for duplicate in result.duplicates:
                logs.duplicate_event(duplicate.id, duplicate.type, duplicate.idempotency_key,
                                     worker_id=self.worker_id)
                if self.metrics is not None:
                    self.metrics.outcome(duplicate.type, "duplicate")
            if result.jobs:
                for claimed in result.jobs:
                    tracing.record_claim(self.queue.name, claimed, claim_ns, time.time_ns())
                    self._start(claimed)
                continue
            if result.duplicates:
                continue
            wait_s = IDLE_WAIT_S
            if result.next_due_ms is not None and result.now_ms is not None:
                wait_s = min(max((result.next_due_ms - result.now_ms) / 1000, 0.005), IDLE_WAIT_S)
            await self._wait_for_work(wait_s)

    async def _wait_for_work(self, timeout_s: float) -> None:
        """Blocks until the ready list is non-empty (or the timeout passes). BLMOVE of the list
        onto itself, tail to tail, leaves it exactly as it was."""
        if self._stopping.is_set():
            return
        ready = self.queue.keys.ready
        self._idle_wait = asyncio.ensure_future(
            self.redis.blmove(ready, ready, timeout_s, "RIGHT", "RIGHT"))
        try:
            await self._idle_wait
        except asyncio.CancelledError:
            if not self._stopping.is_set():
                raise
        except Exception as exc:  # connection trouble shows up on the next claim
            log.debug("idle wait failed", extra={"error": str(exc)})
            await asyncio.sleep(0.05)
        finally:
            self._idle_wait = None

    # -- running ---------------------------------------------------------------------------

    def _start(self, claimed: ClaimedJob) -> None:
        run = Run(claimed)
        self.held.add(run)
        self._running += 1
        run.task = asyncio.create_task(self._execute(run))
        logs.job_event("claimed", claimed, worker_id=self.worker_id, level=logging.DEBUG)

    async def _execute(self, run: Run) -> None:
        claimed = run.claimed
        handler = self.handlers.get(claimed.type)
        try:
            try:
                failure = await self._attempt(handler, run)
            except Exception as exc:  # a defect of ours or a hostile record: never strand a lease
                log.exception("internal error running a job", extra={"job_id": claimed.id})
                failure = Failure(f"internal error: {type(exc).__name__}: {exc}")
        finally:
            self._running -= 1
            self._slot_freed.set()
        if run.lost or run.released:
            return
        run.settling = True
        if self.metrics is not None:  # every finished run, failed ones included
            self.metrics.observe(claimed.type, time.monotonic() - run.started, None)
        if failure is None:
            self.acks.add(run)
            return
        await self._fail(run, handler, failure)

    async def _attempt(self, handler: Handler | None, run: Run) -> Failure | None:
        claimed = run.claimed
        if handler is None:
            return Failure(f"unknown job type {claimed.type!r}; this worker serves "
                           f"{self.handlers.names}", permanent=True)
        try:
            payload = json.loads(claimed.payload_json)
        except ValueError as exc:
            return Failure(f"undecodable payload: {exc}", permanent=True)
        job = Job(
            id=claimed.id, type=claimed.type, payload=payload, attempt=claimed.attempt,
            max_attempts=claimed.max_attempts, idempotency_key=claimed.idempotency_key,
            resource_key=claimed.resource_key, created_at_ms=claimed.created_at_ms,
            headers=_headers(claimed.headers_json),
            _record_step=lambda step, value: self._record_step(claimed, step, value),
            _load_steps=lambda: self._load_steps(claimed), _loop=self._loop,
        )
        timeout_s = handler.timeout_s or self.settings.job_timeout_s
        try:
            with tracing.span("antre.handler", {"antre.queue": self.queue.name, "antre.job.id":
                              claimed.id, "antre.job.type": claimed.type, "antre.job.attempt":
                              claimed.attempt}, parent=job.headers, kind="consumer"):
                if handler.is_async:
                    run.cancellable = True
                    outcome = handler.fn(job)
                    await (asyncio.wait_for(outcome, timeout_s) if timeout_s is not None else outcome)
                else:
                    await self.threads.call(handler.fn, job, timeout_s)
        except Retry as exc:
            return Failure(f"Retry: {exc}", delay_s=exc.delay)
        except Permanent as exc:
            return Failure(f"Permanent: {exc}", permanent=True)
        except TimeoutError:
            return Failure(f"timed out after {timeout_s} s (job timeout)")
        except ThreadTimeout:
            return Failure(f"timed out after {timeout_s} s (job timeout); the handler thread could "
                           "not be interrupted and may still be running", keep_lock=True)
        except LeaseLost as exc:
            return Failure(f"lease lost: {exc}")
        except Exception as exc:
            return Failure(f"{type(exc).__name__}: {exc}")
        return None

    async def _record_step(self, claimed: ClaimedJob, step: str, value_json: str) -> None:
        await scripts.run_async(self.redis, checkpoint_op(
            self.queue, (claimed.id, claimed.lease), step=step, value_json=value_json,
            worker_id=self.worker_id))

    async def _load_steps(self, claimed: ClaimedJob) -> dict[str, str]:
        fields = await self.redis.hgetall(self.queue.keys.job(claimed.id))
        return {name[5:]: value for name, value in fields.items() if name.startswith("step:")}

    # -- settling --------------------------------------------------------------------------

    async def _fail(self, run: Run, handler: Handler | None, failure: Failure) -> None:
        claimed = run.claimed
        if failure.permanent:
            delay_ms = None
        elif failure.delay_s is not None:
            delay_ms = int(failure.delay_s * 1000)
        else:
            backoff = (handler.backoff if handler and handler.backoff else self.settings.backoff)
            delay_ms = backoff.delay_ms(claimed.attempt)
        error = failure.error
        try:
            result = await self.outages.settle(fail_op(
                self.queue, run.lease, error=error, retry_delay_ms=delay_ms,
                worker_id=self.worker_id, keep_lock=failure.keep_lock),
                budget_s=self.settings.visibility_timeout_s)
        except (LeaseLost, RedisUnavailable):
            self.outcomes.record(run, "lease_lost", error=error)
        else:
            outcome = "retried" if result.outcome == "retrying" else "dead"
            self.outcomes.record(run, outcome, error=error, level=logging.WARNING)
        finally:
            self.held.forget(run)

    # -- registry --------------------------------------------------------------------------

    def _registry_entry(self) -> dict[str, Any]:
        return {
            "worker_id": self.worker_id, "pod": self.pod, "host": socket.gethostname(),
            "pid": os.getpid(), "queue": self.queue.name, "in_flight": len(self.held),
            "concurrency": self.settings.concurrency, "started_at_ms": self.started_at_ms,
            "stuck_threads": self.threads.overdue,
        }
