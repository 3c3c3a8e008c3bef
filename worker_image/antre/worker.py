"""The worker runtime: the claim loop and the run of one job, with the heartbeat, the reaper
and the ack batcher beside it in their own modules; graceful shutdown.

One asyncio loop per process runs up to ``concurrency`` handlers. Jobs are claimed in batches
(one script call leases as many as there are free slots) and acknowledged in batches
(:mod:`antre.ack_batcher`); an empty queue is waited on with a blocking BLMOVE that rotates the
list onto itself, so a new job wakes the worker at once without ever leaving the ready list.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import json
import logging
import os
import secrets
import socket
import time
from typing import TYPE_CHECKING, Any

from antre import failures, idle_wait, logs, queue_registry, redis_checks, tracing
from antre.ack_batcher import AckBatcher
from antre.errors import NotReplicated
from antre.failures import Failure
from antre.handler_threads import HandlerThreads, guarded, within
from antre.handlers import Handler, HandlerRegistry
from antre.heartbeat import Heartbeat
from antre.held_runs import HeldRuns
from antre.jobs import ClaimedJob, Job
from antre.late_renewals import LateRenewals
from antre.outages import Outages
from antre.outcomes import Outcomes
from antre.prefetch import PrefetchSizer, jobs_to_claim, jobs_to_hand_back
from antre.protocol import scripts
from antre.protocol.checkpoint import checkpoint_op
from antre.protocol.claim import ClaimResult, claim_op
from antre.protocol.scripts import Op
from antre.reaper import Reaper
from antre.runs import Run
from antre.settings import QueueSettings, WorkerSettings
from antre.settling import Settler

if TYPE_CHECKING:  # only a worker serving metrics imports prometheus_client
    from antre.metrics import WorkerMetrics

log = logging.getLogger("antre.worker")

#: Longest blocking wait on an empty queue; bounds how late a due retry or a stop is noticed.
IDLE_WAIT_S = 1.0
#: How long async handlers get to end once cancelled at shutdown, before their lock is kept.
CANCEL_WAIT_S = 1.0


def next_claim_wait_s(next_due_ms: int | None, now_ms: int | None) -> float:
    """How long the next claim may block waiting for a job: until the next scheduled job is
    due (at least 5 ms), at most IDLE_WAIT_S."""
    if next_due_ms is None or now_ms is None:
        return IDLE_WAIT_S
    return min(max((next_due_ms - now_ms) / 1000, 0.005), IDLE_WAIT_S)


def due_already(next_due_ms: int | None, now_ms: int | None) -> bool:
    """Whether a scheduled job was due when the claim ran (more than it promoted)."""
    return next_due_ms is not None and now_ms is not None and next_due_ms <= now_ms


def _headers(headers_json: str) -> dict[str, str]:
    """The job's headers; anything but a JSON object of strings (a foreign producer's mistake)
    is ignored rather than failing the job."""
    if not headers_json:
        return {}
    try:
        decoded = json.loads(headers_json)
    except (ValueError, RecursionError):
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
        #: When the worker started, on the Redis clock (read at start), for uptimes.
        self.started_at_ms: int | None = None
        self._running = 0
        #: Runs claimed ahead of a free slot (prefetch), leased and renewed, in claim order;
        #: a run of a plain ``def`` handler maps to the job it is armed with (see _arm).
        self._waiting: collections.OrderedDict[Run, Job | None] = collections.OrderedDict()
        self.prefetch = PrefetchSizer(settings.prefetch_jobs)
        self._slot_freed = asyncio.Event()
        #: Wakes the claim loop to check the prefetch buffer while every slot is busy.
        self._recheck: asyncio.TimerHandle | None = None
        self._stopping = asyncio.Event()
        self._idle_wait: asyncio.Task[Any] | None = None
        self._idle = idle_wait.IdleWait(redis)
        self._interrupt: asyncio.Task[None] | None = None
        self._loops: list[asyncio.Task[Any]] = []
        self._loop: asyncio.AbstractEventLoop | None = None
        self.outages = Outages(redis, queue_name=queue.name, worker_id=self.worker_id,
                               metrics=metrics)
        self.outcomes = Outcomes(queue.name, self.worker_id, metrics)
        self.held = HeldRuns(self.outcomes, lease_s=settings.visibility_timeout_s)
        scripts.check_durable_client(redis, queue)
        self.threads = HandlerThreads(settings.concurrency, on_slot_freed=self._on_slot_freed,
                                      on_lock_freed=lambda run: self.settler.unlock_soon(run),
                                      on_started=self._on_thread_started)
        self.settler = Settler(redis, queue, settings, worker_id=self.worker_id,
                               outages=self.outages, outcomes=self.outcomes, held=self.held,
                               threads=self.threads)
        self.acks = AckBatcher(queue, worker_id=self.worker_id, outages=self.outages,
                               outcomes=self.outcomes, retry_window_s=settings.visibility_timeout_s,
                               on_settled=self.held.forget)
        self.late_renewals = LateRenewals(self.settler, worker_id=self.worker_id)
        self.heartbeat = Heartbeat(redis, queue, settings, worker_id=self.worker_id,
                                   held=self.held, kept_locks=self.settler.kept_locks,
                                   registry_entry=self._registry_entry,
                                   give_back=self.late_renewals.give_back_soon, metrics=metrics)
        self.reaper = Reaper(redis, queue, interval_s=settings.reaper_interval_s,
                             holder=self.worker_id, metrics=metrics)
        if metrics is not None:
            metrics.limit_types(handlers.names)
            metrics.stuck_threads.labels(queue.name).set_function(lambda: self.threads.overdue)

    # -- lifecycle -------------------------------------------------------------------------

    def stop(self) -> None:
        """Begins a graceful shutdown (what SIGTERM does); ``run`` returns when it is over."""
        self._stopping.set()
        self._slot_freed.set()
        self.threads.disarm_all()  # no thread starts a prefetched run from now on
        if self._idle_wait is not None:
            self._idle_wait.cancel()
        if self._loop is not None:
            self._interrupt = self._loop.create_task(self._idle.interrupt())

    @property
    def in_flight(self) -> int:
        return len(self.held)

    @property
    def succeeded(self) -> int:
        """Runs this worker has acknowledged."""
        return self.outcomes.succeeded

    def health(self) -> tuple[bool, str]:
        """For the liveness probe: unhealthy once one of the worker's loops has ended while the
        worker is not stopping (they only end on a defect), or when every slot is held by a
        handler thread past its job timeout (nothing can run): a restart is the cure."""
        overdue = self.threads.overdue
        note = (f"; {overdue} of {self.settings.concurrency} slot(s) held by handler threads "
                "past their job timeout") if overdue else ""
        if self._stopping.is_set():
            return True, "stopping" + note
        if not all(not task.done() for task in self._loops):
            return False, "a worker loop ended" + note
        if overdue >= self.settings.concurrency:
            return False, "no free slot" + note
        return True, "ok" + note

    def healthy(self) -> bool:
        return self.health()[0]

    async def run(self) -> None:
        self._loop = asyncio.get_running_loop()
        await self._check_redis()
        await queue_registry.register_async(self.redis, self.queue.prefix, self.queue.name)
        log.info("worker started", extra={
            "worker_id": self.worker_id, "queue": self.queue.name, "pod": self.pod,
            "concurrency": self.settings.concurrency, "handlers": self.handlers.names})
        with contextlib.suppress(Exception):  # Redis may be down; the loops retry
            self.started_at_ms = await redis_checks.server_time_ms(self.redis)
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
            await self.late_renewals.finish()  # a give-back may keep a lock for a handler too
            await self.settler.handlers_ended()  # before the heartbeat stops extending locks
        finally:
            if self._recheck is not None:
                self._recheck.cancel()
            claimer.cancel()
            for task in background:
                task.cancel()
            # A task can swallow a cancellation that lands inside a redis-py call: ask again.
            while not all(task.done() for task in (claimer, *background)):
                await asyncio.wait([claimer, *background], timeout=0.2)
                for task in background:
                    task.cancel()
            await asyncio.gather(claimer, *background, return_exceptions=True)
            await self._idle.close()
            await self.acks.close()
            await self.heartbeat.unregister()
            await self.late_renewals.finish()  # before the unlocks a release may start
            await self.settler.finish()
            self.threads.shutdown()
            self.outcomes.log_summary()
            log.info("worker stopped", extra={"worker_id": self.worker_id,
                                              "succeeded": self.succeeded})

    async def _check_redis(self) -> None:
        try:
            warning = await redis_checks.eviction_policy_warning(self.redis, self.queue.keys)
        except Exception as exc:  # INFO may be renamed on managed Redis; not fatal
            log.debug("could not read maxmemory-policy", extra={"error": str(exc)})
            return
        if warning:
            log.warning(warning, extra={"queue": self.queue.name})

    async def _drain(self) -> None:
        """Lets running jobs finish within the grace period, then releases the rest. Async
        handlers are cancelled first; a run that cannot be stopped (a thread) keeps its resource
        lock while the process lives, and the lock expires one lease after it exits."""
        deadline = time.monotonic() + self.settings.grace_period_s
        waiting = [run for run in self._waiting if not run.lost and not self.threads.running(run)]
        self._waiting.clear()
        if waiting:  # prefetched, never started: back to the queue at once
            for run in waiting:
                run.released = True
            await self.settler.release(waiting, still_going=(), unstarted=True)
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
                if run.cancellable and run.task is not None:
                    run.task.cancel()
            cancelled = [run.task for run in unfinished if run.cancellable and run.task]
            if cancelled:
                await asyncio.wait(cancelled, timeout=CANCEL_WAIT_S)
            await self.settler.release(unfinished,
                                       still_going=self.settler.still_going(unfinished))
            for run in unfinished:  # a thread goes on, but nothing waits for it any more
                if run.task is not None:
                    run.task.cancel()
        settling = [run.task for run in self.held if run.task and not run.task.done()]
        if settling:  # fail calls already under way: let them land
            await asyncio.wait(settling, timeout=10.0)
        await self.acks.flush()

    # -- claiming --------------------------------------------------------------------------

    def _wanted(self, buffer: int) -> int:
        """Jobs to claim now (see jobs_to_claim)."""
        return jobs_to_claim(
            concurrency=self.settings.concurrency, busy=self._running + self.threads.overdue,
            waiting=len(self._waiting), buffer=buffer)

    def _take_excess(self, buffer: int) -> list[Run]:
        """Takes out of the buffer, to be handed back unstarted, the prefetched runs held beyond
        a buffer of ``buffer`` (see jobs_to_hand_back), newest first: the work turned long, and
        an idle worker can start them now. A run a returning thread already started is left to
        it; the runs taken are marked released, so nothing starts them."""
        oldest = next(iter(self._waiting))
        excess = jobs_to_hand_back(
            waiting=len(self._waiting), buffer=buffer, waited_s=time.monotonic() - oldest.started,
            after_s=self.prefetch.hand_back_after_s())
        runs: list[Run] = []
        if excess <= 0 or self._stopping.is_set():
            return runs
        for _ in range(min(excess, len(self._waiting))):
            run, job = self._waiting.popitem(last=True)
            if job is not None and not self.threads.disarm(run):
                continue  # a returning thread started it: _on_thread_started has it
            if not run.lost and not run.released:  # a lost one is dropped, as at a start
                run.released = True  # out of _waiting and disarmed: nothing starts it now
                runs.append(run)
        return runs

    async def _hand_back(self, runs: list[Run]) -> None:
        log.debug("prefetched jobs handed back unstarted: the work outgrew the buffer",
                 extra={"worker_id": self.worker_id, "jobs": len(runs)})
        await self.settler.hand_back(runs)

    def _recheck_later(self) -> None:
        """Wakes the claim loop once the held jobs may be due to be handed back (one timer at
        a time, only while jobs are held and no slot is free)."""
        if self._recheck is None and self._loop is not None:
            self._recheck = self._loop.call_later(self.prefetch.hand_back_after_s(),
                                                  self._recheck_due)

    def _recheck_due(self) -> None:
        self._recheck = None
        self._slot_freed.set()

    async def _claim_loop(self) -> None:
        outages = 0
        # Set while the queue is empty: the next claim blocks first, until this (monotonic) time.
        wait_until: float | None = None
        # A claim that failed is sent again as it was, with its claim id: if it ran and only
        # its reply was lost, Redis answers its leases again instead of leasing more.
        resend: Op[ClaimResult] | None = None
        asked = 0  # how many jobs the claim in flight asked for
        while not self._stopping.is_set():
            buffer = self.prefetch.size(time.monotonic())
            excess = self._take_excess(buffer) if self._waiting and resend is None else None
            if excess:
                await self._hand_back(excess)
            wanted = self._wanted(buffer)
            if wanted <= 0 and resend is None:
                self._slot_freed.clear()
                if self._waiting:
                    self._recheck_later()
                await self._slot_freed.wait()
                continue
            if resend is None:
                asked = min(wanted, scripts.MAX_JOBS_PER_CALL)
            # A wait decided before the worker waited for a free slot is shorter by that time.
            wait_s = None if wait_until is None else wait_until - time.monotonic()
            if wait_s is not None and wait_s <= 0:
                wait_s = None
            op = resend or claim_op(self.queue, self.settings, worker_id=self.worker_id,
                                    max_jobs=asked, claim_id=secrets.token_hex(8))
            resend = None
            from_idle_wait = wait_s is not None
            try:
                # Never cancelled mid-call: a claim whose reply is lost would strand its jobs
                # until their leases expire (a stop interrupts the idle wait instead).
                claim_ns, claim_sent_at = time.time_ns(), time.monotonic()
                if wait_s is None:
                    result = await self._idle.connection.run(op)
                    self.prefetch.claimed(time.monotonic() - claim_sent_at)
                elif idle_wait.supported(self.redis, op):
                    result = await self._idle.claim_when_ready(self.queue.keys.ready, op, wait_s,
                                                               ahead=self.acks.ride())
                    # The leases began when the claim ran, after the wait: count from there.
                    claim_sent_at += self._idle.waited_s
                    # A worker that keeps up sends every claim behind the wait: its round trip
                    # (the wait taken out) is what sizes the prefetch buffer then.
                    self.prefetch.claimed(max(time.monotonic() - claim_sent_at, 0.0))
                else:
                    await self._wait_for_work(wait_s)
                    continue
            except NotReplicated as exc:
                # Too few replicas have the claim (durable_replicas): a failover could still undo
                # it and lease these jobs again, so they are given back unstarted.
                outages += 1
                assert isinstance(exc.result, ClaimResult)
                if exc.result.jobs:
                    await self.settler.give_back(
                        exc.result.jobs, reason="claim not confirmed by the replicas in time")
                await self.outages.wait("claim", exc, outages)
                continue
            except Exception as exc:  # an outage, or Redis refusing (LOADING, READONLY...)
                outages += 1
                resend = op
                await self.outages.wait("claim", exc, outages)
                continue
            finally:
                wait_until = None
            if result.replayed_claimed_at_ms is not None and result.now_ms is not None:
                # The leases began at the first sending: count from there (Redis's clock alone).
                claim_sent_at -= max(result.now_ms - result.replayed_claimed_at_ms, 0) / 1000
                log.info("a claim's reply was lost; Redis answered its leases again",
                         extra={"worker_id": self.worker_id, "jobs": len(result.jobs)})
            if outages:
                log.info("redis reachable again", extra={"worker_id": self.worker_id})
                outages = 0
            if result.silent_worker:
                # Frozen or cut off past a lease (the claim was sent before): Redis counts this
                # worker's leases as lost and leases it nothing until a beat lands again.
                log.warning("no heartbeat reached Redis for a whole lease; beating before the "
                            "next claim", extra={"worker_id": self.worker_id})
                await self.heartbeat.beat_now(timeout_s=1.0)
                continue
            for duplicate in result.duplicates:
                logs.duplicate_event(duplicate, worker_id=self.worker_id)
                if self.metrics is not None:
                    self.metrics.outcome(duplicate.type, "duplicate")
            if result.jobs and time.monotonic() >= claim_sent_at + self.held.trusted_s:
                await self.settler.give_back(
                    result.jobs, reason="claim reply came back after its leases' deadline")
                continue
            if result.jobs and self._stopping.is_set():  # the idle wait interrupted by a stop
                await self.settler.give_back(result.jobs, reason="worker stopping")
                continue
            if result.jobs:
                runs = [Run(claimed) for claimed in result.jobs]
                self.held.add(runs, claim_sent_at=claim_sent_at)
                for run in runs:
                    run.trace_parent = tracing.record_claim(self.queue.name, run.claimed,
                                                            claim_ns, time.time_ns())
                self._waiting.update(dict.fromkeys(runs))
                self._start_waiting()
                for run in runs:
                    if run in self._waiting:
                        self._arm(run)
                if from_idle_wait:
                    # The queue was empty and these jobs just arrived: let their handlers begin
                    # before the next claim is built and sent (about 0.25 ms at idle here). A
                    # busy drain does not yield: its next claim overlaps the handlers' work.
                    await asyncio.sleep(0)
            if result.replayed_claimed_at_ms is not None or (
                    len(result.jobs) + len(result.duplicates) >= asked):
                continue  # the ready list may hold more: claim again at once
            if (result.jobs or result.duplicates) and due_already(result.next_due_ms,
                                                                  result.now_ms):
                continue  # more retries were due than one claim promotes
            # Fewer jobs than asked for: the ready list ran out (or what was popped was deferred
            # or settled). The next claim waits behind a blocking pop, which returns at once if
            # a job arrived meanwhile; a claim sent straight away would mostly find nothing and
            # cost a round trip per job on a queue that keeps up with its producers.
            wait_until = time.monotonic() + next_claim_wait_s(result.next_due_ms, result.now_ms)

    async def _wait_for_work(self, timeout_s: float) -> None:
        """Blocks until the ready list is non-empty (or the timeout passes), for clients that
        cannot queue the claim behind the wait (:mod:`antre.idle_wait`). BLMOVE of the list
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

    def _start_waiting(self) -> None:
        """Starts prefetched runs while slots are free (their lease was renewed meanwhile; one
        found lost is dropped)."""
        while (self._waiting and not self._stopping.is_set()
               and self._running + self.threads.overdue < self.settings.concurrency):
            run, job = self._waiting.popitem(last=False)
            if job is not None and not self.threads.disarm(run):
                continue  # a returning thread started it: _on_thread_started has it
            if not run.lost and not run.released:
                self._start(run, job)

    def _arm(self, run: Run) -> None:
        """Lets a returning handler thread start ``run`` itself, with no hop through the loop
        (:mod:`antre.handler_threads`), when it is a valid job for a plain ``def`` handler."""
        handler = self.handlers.get(run.claimed.type)
        if handler is None or handler.is_async or self._stopping.is_set():
            return
        job = self._job(run.claimed)
        if isinstance(job, Job):
            self._waiting[run] = job
            self.threads.arm(run, handler.fn, job)

    def _on_thread_started(self, run: Run, job: Job, returned: asyncio.Future[Any],
                           started_at: float) -> None:
        self._waiting.pop(run, None)
        self._start(run, job, returned, started_at)

    def _on_slot_freed(self) -> None:
        self._start_waiting()
        self._slot_freed.set()

    def _start(self, run: Run, job: Job | None = None, returned: asyncio.Future[Any] | None = None,
               started_at: float | None = None) -> None:
        """Runs ``run`` in a slot: ``job`` if it was prepared, and for a run a handler thread
        already started (``started_at``), the future of that thread's return."""
        self._running += 1
        # The job's time runs from here, not from the claim.
        run.started = time.monotonic() if started_at is None else started_at
        run.task = asyncio.create_task(self._execute(run, job, returned))
        logs.job_event("claimed", run.claimed, worker_id=self.worker_id, level=logging.DEBUG)

    async def _execute(self, run: Run, job: Job | None,
                       returned: asyncio.Future[Any] | None) -> None:
        claimed = run.claimed
        handler = self.handlers.get(claimed.type)
        try:
            try:
                failure = await self._attempt(handler, run, job, returned)
            except Exception as exc:  # a defect of ours or a hostile record: never strand a lease
                log.exception("internal error running a job", extra={"job_id": claimed.id})
                failure = Failure(f"internal error: {type(exc).__name__}: {exc}")
        finally:
            self._running -= 1
            self.prefetch.finished(time.monotonic())
            self._on_slot_freed()
        if run.lost or run.released:
            return
        run.settling = True
        if self.metrics is not None:  # every finished run, failed ones included
            self.metrics.observe(claimed.type, time.monotonic() - run.started)
        if failure is None:
            self.acks.add(run)
            return
        await self.settler.fail(run, failure, handler.backoff if handler and handler.backoff
                                else self.settings.backoff)

    def _job(self, claimed: ClaimedJob) -> Job | Failure:
        """What the handler is called with, or why the job cannot run."""
        try:
            payload = json.loads(claimed.payload_json)
        except (ValueError, RecursionError) as exc:  # a foreign producer's payload
            return Failure(f"undecodable payload: {exc}", permanent=True)
        return Job(
            id=claimed.id, type=claimed.type, payload=payload, attempt=claimed.attempt,
            max_attempts=claimed.max_attempts, idempotency_key=claimed.idempotency_key,
            resource_key=claimed.resource_key, created_at_ms=claimed.created_at_ms,
            headers=_headers(claimed.headers_json),
            _record_step=lambda step, value: self._record_step(claimed, step, value),
            _load_steps=lambda: self._load_steps(claimed), _loop=self._loop,
        )

    async def _attempt(self, handler: Handler | None, run: Run, job: Job | None,
                       returned: asyncio.Future[Any] | None) -> Failure | None:
        claimed = run.claimed
        if handler is None:
            return failures.unknown_type(claimed, self.handlers.names)
        if job is None:
            prepared = self._job(claimed)
            if isinstance(prepared, Failure):
                return prepared
            job = prepared
        timeout_s = handler.timeout_s or self.settings.job_timeout_s
        try:
            with tracing.span("antre.handler", {"antre.queue": self.queue.name, "antre.job.id":
                              claimed.id, "antre.job.type": claimed.type, "antre.job.attempt":
                              claimed.attempt}, parent=run.trace_parent, kind="consumer"):
                if handler.is_async:
                    run.cancellable = True
                    await within(guarded(handler.fn(job)), timeout_s)
                else:
                    if returned is None:
                        returned = self.threads.start(run, handler.fn, job)
                    await self.threads.wait(run, returned, timeout_s)
        except Exception as exc:
            return failures.from_exception(exc, timeout_s=timeout_s)
        return None

    async def _record_step(self, claimed: ClaimedJob, step: str, value_json: str) -> None:
        # Retried through an outage (a failover) and until the replicas confirm it: recording
        # a step again is harmless, and the script refuses once the lease is gone.
        await self.outages.settle(checkpoint_op(
            self.queue, (claimed.id, claimed.lease), step=step, value_json=value_json,
            worker_id=self.worker_id), budget_s=self.settings.visibility_timeout_s)

    async def _load_steps(self, claimed: ClaimedJob) -> dict[str, str]:
        fields = await self.redis.hgetall(self.queue.keys.job(claimed.id))
        return {name[5:]: value for name, value in fields.items() if name.startswith("step:")}

    # -- registry --------------------------------------------------------------------------

    def _registry_entry(self) -> dict[str, Any]:
        return {
            "worker_id": self.worker_id, "pod": self.pod, "host": socket.gethostname(),
            "pid": os.getpid(), "queue": self.queue.name, "in_flight": len(self.held),
            "concurrency": self.settings.concurrency, "started_at_ms": self.started_at_ms or 0,
            "stuck_threads": self.threads.overdue,
            # The holders (job ids) of the locks kept for handlers still going, for `antre doctor`.
            "kept_locks": [holder.split(":", 1)[0] for _, holder in self.settler.kept_locks()],
        }
