"""The worker runtime: claim, run, settle; heartbeat and reaper beside it; graceful shutdown.

One asyncio loop per process runs up to ``concurrency`` handlers. Jobs are claimed in batches
(one script call leases as many as there are free slots), acknowledged in batches (completions
that arrive while an ack is in flight ride on the next one), and an empty queue is waited on
with a blocking BLMOVE that rotates the list onto itself, so a new job wakes the worker at once
without ever leaving the ready list.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import json
import logging
import os
import secrets
import socket
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from antre import errors, logs, redis_checks, tracing
from antre.backoff import Backoff
from antre.errors import LeaseLost, Permanent, RedisUnavailable, Retry
from antre.handlers import Handler, HandlerRegistry
from antre.heartbeat import Heartbeat
from antre.jobs import ClaimedJob, Job
from antre.metrics import WorkerMetrics
from antre.protocol import scripts
from antre.protocol.claim import claim_op
from antre.protocol.settle import Lease, ack_op, checkpoint_op, fail_op, release_op
from antre.reaper import Reaper
from antre.settings import QueueSettings, WorkerSettings

log = logging.getLogger("antre.worker")

#: Longest blocking wait on an empty queue; bounds how late a due retry or a stop is noticed.
IDLE_WAIT_S = 1.0
#: Delays between attempts to reach Redis during an outage.
OUTAGE_BACKOFF = Backoff(base_s=0.05, max_s=2.0)


@dataclass(frozen=True, slots=True)
class Failure:
    """Why a run failed, and how to settle it."""

    error: str
    #: Retry after this many seconds; None uses the backoff.
    delay_s: float | None = None
    #: Straight to dead: retrying is useless.
    permanent: bool = False
    #: Leave the resource lock to expire instead of freeing it (the run may still be going).
    keep_lock: bool = False


class _ThreadTimeout(Exception):
    """A plain ``def`` handler overran its timeout and its thread is still running."""


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


@dataclass(slots=True, eq=False)
class Run:
    """One leased job in this process, from claim until its settle call returns."""

    claimed: ClaimedJob
    task: asyncio.Task[None] | None = None
    started: float = field(default_factory=time.monotonic)
    #: The heartbeat found the lease gone: the result must be discarded.
    lost: bool = False
    #: Shutdown gave the job back: the result must be discarded.
    released: bool = False
    #: The handler returned; the ack or fail call now reports the truth about the lease.
    settling: bool = False
    #: An async handler can be cancelled; a thread cannot, so its slot stays busy until it returns.
    cancellable: bool = False


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
        # Every lease this process holds, running or waiting for its ack.
        self._held: dict[str, Run] = {}
        self._running = 0
        self._acks: list[Run] = []
        self._ack_ready = asyncio.Event()
        self._acks_idle = asyncio.Event()
        self._acks_idle.set()
        self._slot_freed = asyncio.Event()
        self._stopping = asyncio.Event()
        self._idle_wait: asyncio.Task[Any] | None = None
        self._loops: list[asyncio.Task[Any]] = []
        self._executor = ThreadPoolExecutor(max_workers=settings.concurrency,
                                            thread_name_prefix="antre-handler")
        self._loop: asyncio.AbstractEventLoop | None = None
        self.heartbeat = Heartbeat(
            redis, queue, settings, worker_id=self.worker_id, held_leases=self._held_leases,
            on_lost=self._lease_lost, registry_entry=self._registry_entry, metrics=metrics)
        self.reaper = Reaper(redis, queue, interval_s=settings.reaper_interval_s,
                             holder=self.worker_id, metrics=metrics)
        self.succeeded = 0

    # -- lifecycle -------------------------------------------------------------------------

    def stop(self) -> None:
        """Begins a graceful shutdown (what SIGTERM does); ``run`` returns when it is over."""
        self._stopping.set()
        self._slot_freed.set()
        if self._idle_wait is not None:
            self._idle_wait.cancel()

    @property
    def in_flight(self) -> int:
        return len(self._held)

    def healthy(self) -> bool:
        """For the liveness probe: False once one of the worker's loops has ended while the
        worker is not stopping (they only end on a defect; a restart is the cure)."""
        if self._stopping.is_set():
            return True
        return all(not task.done() for task in self._loops)

    async def run(self) -> None:
        self._loop = asyncio.get_running_loop()
        await self._check_redis()
        log.info("worker started", extra={
            "worker_id": self.worker_id, "queue": self.queue.name, "pod": self.pod,
            "concurrency": self.settings.concurrency, "handlers": self.handlers.names})
        with contextlib.suppress(Exception):  # Redis may be down; the loops retry
            await self.heartbeat.step()  # register at once, so the operator sees us
        claimer = asyncio.create_task(self._claim_loop(), name="antre-claim")
        background = [
            asyncio.create_task(self._ack_loop(), name="antre-ack"),
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
            await self._unregister()
            self._executor.shutdown(wait=False, cancel_futures=True)
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
            tasks = [run.task for run in self._held.values() if run.task and not run.task.done()]
            if not tasks:
                break
            await asyncio.wait(tasks, timeout=max(deadline - time.monotonic(), 0))
        unfinished = [run for run in self._held.values()
                      if run.task and not run.task.done() and not run.settling]
        if unfinished:
            for run in unfinished:
                run.released = True
            leases = [(run.claimed.id, run.claimed.lease) for run in unfinished]
            try:
                released = await self._settle(release_op(
                    self.queue, leases, worker_id=self.worker_id,
                    reason="worker shutting down"), budget_s=5.0)
            except (RedisUnavailable, LeaseLost):
                released = [False] * len(unfinished)
            for run, ok in zip(unfinished, released, strict=True):
                if run.task is not None:
                    run.task.cancel()
                self._held.pop(run.claimed.id, None)
                self._outcome(run, "released" if ok else "lease_lost")
        settling = [run.task for run in self._held.values() if run.task and not run.task.done()]
        if settling:  # fail calls already under way: let them land
            await asyncio.wait(settling, timeout=10.0)
        await self._flush_acks_before_exit()

    async def _flush_acks_before_exit(self, budget_s: float = 10.0) -> None:
        deadline = time.monotonic() + budget_s
        while (self._acks or not self._acks_idle.is_set()) and time.monotonic() < deadline:
            self._ack_ready.set()
            await asyncio.sleep(0.01)

    async def _unregister(self) -> None:
        with contextlib.suppress(Exception):
            pipe = self.redis.pipeline(transaction=False)
            pipe.delete(self.queue.keys.worker(self.worker_id))
            pipe.zrem(self.queue.keys.workers, self.worker_id)
            await pipe.execute()

    # -- claiming --------------------------------------------------------------------------

    async def _claim_loop(self) -> None:
        outages = 0
        while not self._stopping.is_set():
            free = self.settings.concurrency - self._running
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
                await self._outage("claim", exc, outages)
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

    async def _outage(self, operation: str, exc: Exception, count: int) -> None:
        if count == 1:
            log.warning("redis call failed; retrying with backoff",
                        extra={"operation": operation, "error": str(exc),
                               "worker_id": self.worker_id})
        if self.metrics is not None:
            self.metrics.redis_errors.labels(self.queue.name, operation).inc()
        await asyncio.sleep(OUTAGE_BACKOFF.delay_ms(count) / 1000 + 0.01)

    # -- running ---------------------------------------------------------------------------

    def _start(self, claimed: ClaimedJob) -> None:
        run = Run(claimed)
        previous = self._held.get(claimed.id)
        if previous is not None:  # a newer lease of a job we still run: the old run is lost
            self._lease_lost(claimed.id, previous.claimed.lease, "re-claimed under a newer lease")
        self._held[claimed.id] = run
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
            self._acks.append(run)
            self._ack_ready.set()
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
                    await self._call_in_thread(handler, job, timeout_s)
        except Retry as exc:
            return Failure(f"Retry: {exc}", delay_s=exc.delay)
        except Permanent as exc:
            return Failure(f"Permanent: {exc}", permanent=True)
        except TimeoutError:
            return Failure(f"timed out after {timeout_s} s (job timeout)")
        except _ThreadTimeout:
            return Failure(f"timed out after {timeout_s} s (job timeout); the handler thread could "
                           "not be interrupted and may still be running", keep_lock=True)
        except LeaseLost as exc:
            return Failure(f"lease lost: {exc}")
        except Exception as exc:
            return Failure(f"{type(exc).__name__}: {exc}")
        return None

    async def _call_in_thread(self, handler: Handler, job: Job, timeout_s: float | None) -> None:
        """Runs a plain ``def`` handler in the pool. A thread cannot be interrupted: on timeout
        the job is failed at once (retried with backoff, the resource lock left to expire rather
        than freed under a running thread), while the thread keeps a concurrency slot until it
        returns, so a stuck handler never has work piling up behind it."""
        assert self._loop is not None
        future = self._loop.run_in_executor(self._executor, handler.fn, job)
        done, _ = await asyncio.wait({future}, timeout=timeout_s)
        if not done:
            self._running += 1

            def free_slot(_: asyncio.Future[Any]) -> None:
                self._running -= 1
                self._slot_freed.set()

            future.add_done_callback(free_slot)
            raise _ThreadTimeout
        result = future.result()
        if inspect.isawaitable(result):  # a sync wrapper around a coroutine function
            await (asyncio.wait_for(result, timeout_s) if timeout_s is not None else result)

    async def _record_step(self, claimed: ClaimedJob, step: str, value_json: str) -> None:
        await scripts.run_async(self.redis, checkpoint_op(
            self.queue, (claimed.id, claimed.lease), step=step, value_json=value_json,
            worker_id=self.worker_id))

    async def _load_steps(self, claimed: ClaimedJob) -> dict[str, str]:
        fields = await self.redis.hgetall(self.queue.keys.job(claimed.id))
        return {name[5:]: value for name, value in fields.items() if name.startswith("step:")}

    # -- settling --------------------------------------------------------------------------

    async def _settle(self, op: scripts.Op[Any], *, budget_s: float | None = None) -> Any:
        """Runs a settle call, retrying through a Redis outage for up to a lease's length:
        after that the lease is gone anyway and the reaper owns the job."""
        budget = self.settings.visibility_timeout_s if budget_s is None else budget_s
        deadline = time.monotonic() + budget
        attempt = 0
        while True:
            try:
                return await scripts.run_async(self.redis, op)
            except (LeaseLost, errors.JobNotFound):
                raise
            except Exception as exc:  # outage or a refusing server: retry within the budget
                attempt += 1
                if time.monotonic() >= deadline:
                    raise RedisUnavailable(f"{op.script.name} gave up: {exc}") from exc
                await self._outage(op.script.name, exc, attempt)

    async def _ack_loop(self) -> None:
        while True:
            await self._ack_ready.wait()
            self._ack_ready.clear()
            while self._acks:
                self._acks_idle.clear()
                batch, self._acks = self._acks, []
                leases = [(run.claimed.id, run.claimed.lease) for run in batch]
                ack_ns = time.time_ns()
                try:
                    held = await self._settle(ack_op(self.queue, leases, worker_id=self.worker_id))
                except RedisUnavailable:
                    # Out of budget: the leases have expired and the reaper redelivers them.
                    held = [False] * len(batch)
                acked_ns = time.time_ns()
                for run, ok in zip(batch, held, strict=True):
                    if tracing.recording():
                        tracing.record_span("antre.ack", ack_ns, acked_ns, {
                            "antre.job.id": run.claimed.id, "antre.batch": len(batch)},
                            parent=tracing.job_context(run.claimed.headers_json),
                            error=None if ok else "lease lost")
                    if self._held.get(run.claimed.id) is run:
                        del self._held[run.claimed.id]
                    if ok:
                        self.succeeded += 1
                        self._outcome(run, "succeeded")
                    else:
                        self._outcome(run, "lease_lost")
            self._acks_idle.set()

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
            result = await self._settle(fail_op(self.queue, (claimed.id, claimed.lease),
                                                error=error, retry_delay_ms=delay_ms,
                                                worker_id=self.worker_id,
                                                keep_lock=failure.keep_lock))
        except (LeaseLost, RedisUnavailable):
            self._outcome(run, "lease_lost", error=error)
        else:
            outcome = "retried" if result.outcome == "retrying" else "dead"
            self._outcome(run, outcome, error=error, level=logging.WARNING)
        finally:
            if self._held.get(claimed.id) is run:
                del self._held[claimed.id]

    def _outcome(self, run: Run, outcome: str, *, error: str | None = None,
                 level: int = logging.INFO) -> None:
        claimed = run.claimed
        if self.metrics is not None:
            self.metrics.outcome(claimed.type, outcome)
            if outcome == "succeeded":
                # Wall clock against the Redis clock that stamped created_at: close enough for
                # a histogram whose smallest bucket is 5 ms.
                latency = max(time.time() - claimed.created_at_ms / 1000, 0.0)
                self.metrics.latency.labels(self.queue.name, claimed.type).observe(latency)
        event = {"succeeded": "acked", "retried": "retrying"}.get(outcome, outcome)
        if outcome == "lease_lost":
            level = logging.WARNING
        logs.job_event(event, claimed, worker_id=self.worker_id, level=level,
                       duration_ms=round((time.monotonic() - run.started) * 1000, 3),
                       **({"error": error} if error else {}))

    # -- heartbeat callbacks ---------------------------------------------------------------

    def _held_leases(self) -> list[Lease]:
        return [(job_id, run.claimed.lease) for job_id, run in self._held.items()
                if not run.lost and not run.released]

    def _lease_lost(self, job_id: str, lease: int,
                    reason: str = "heartbeat found the lease gone") -> None:
        run = self._held.get(job_id)
        # Only the run holding that very lease; a settling run's ack or fail call is in flight
        # and its reply decides the outcome.
        if (run is None or run.claimed.lease != lease or run.lost or run.released
                or run.settling):
            return
        run.lost = True
        # An async handler stops at its next await. A thread cannot be stopped: its task keeps
        # the slot until the thread returns, and what it returns is discarded.
        if run.cancellable and run.task is not None and not run.task.done():
            run.task.cancel()
        del self._held[job_id]
        self._outcome(run, "lease_lost", error=reason)

    def _registry_entry(self) -> dict[str, Any]:
        return {
            "worker_id": self.worker_id, "pod": self.pod, "host": socket.gethostname(),
            "pid": os.getpid(), "queue": self.queue.name, "in_flight": len(self._held),
            "concurrency": self.settings.concurrency, "started_at_ms": self.started_at_ms,
        }
