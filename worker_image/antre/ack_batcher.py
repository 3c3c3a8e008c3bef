"""The ack batcher: acknowledges finished runs in batches, one script call per batch (asynq's
syncer, one loop per module). Completions that arrive while an ack is in flight ride on the
next one, so a busy worker makes far fewer round trips than it runs jobs. Acks queued when the
claim loop writes its idle wait go in that write instead (:meth:`AckBatcher.ride`): a worker
whose jobs arrive one at a time then makes one round trip per job, not two."""

from __future__ import annotations

import asyncio
import functools
import time
from collections.abc import Callable

from antre import tracing
from antre.direct_connection import DirectConnection
from antre.idle_wait import Ahead
from antre.outages import Outages
from antre.outcomes import Outcomes
from antre.protocol import scripts
from antre.protocol.ack import AckResult, ack_op
from antre.protocol.scripts import Durability, Op
from antre.runs import Run
from antre.settings import QueueSettings


class AckBatcher:
    """An ack is retried through an outage until it lands (or the worker stops): a run that
    finished is worth reporting late. If its lease expired meanwhile, the job runs again, unless
    that was its last attempt: then the late ack records it done instead of dead."""

    def __init__(self, queue: QueueSettings, *, worker_id: str, outages: Outages,
                 outcomes: Outcomes, retry_window_s: float,
                 on_settled: Callable[[Run], None]) -> None:
        self.queue = queue
        #: The batcher's own connection: one ack call at a time.
        self.connection = DirectConnection(outages.redis)
        self.worker_id = worker_id
        self.outages = outages
        self.outcomes = outcomes
        #: With done_ttl_s=0, how long an ack retried after a lost reply is still recognised.
        self.retry_window_ms = int(retry_window_s * 1000)
        #: Called for each run of a batch once its ack call returned, whatever the answer.
        self.on_settled = on_settled
        self._pending: list[Run] = []
        #: Ack calls riding on the claim loop's write (:meth:`ride`) not answered yet.
        self._riding = 0
        self._ready = asyncio.Event()
        self._idle = asyncio.Event()
        self._idle.set()

    def add(self, run: Run) -> None:
        """Queues a run whose handler succeeded; the loop acks it with the next batch."""
        self._pending.append(run)
        self._ready.set()

    @property
    def pending(self) -> int:
        return len(self._pending)

    def ride(self) -> Ahead[AckResult] | None:
        """The queued acks (at most MAX_JOBS_PER_CALL) as a call the claim loop writes in front
        of its idle wait, sparing the ack a write and a wake-up of its own; None when none is
        queued, or when the queue's acks must be confirmed by replicas (a WAIT pipeline). The
        runs go back to the queue for this loop to send if the call gets no reply."""
        if not self._pending or Durability.of(self.queue) is not None:
            return None
        batch = self._take()
        self._riding += 1
        return Ahead(self._op(batch), functools.partial(self._ride_answered, batch, time.time_ns()))

    def _ride_answered(self, batch: list[Run], ack_ns: int, result: AckResult | None) -> None:
        self._riding -= 1
        if result is None:
            self._pending[:0] = batch
            self._ready.set()
        else:
            self._settled(batch, result, ack_ns)

    async def step(self) -> list[bool]:
        """Acks the runs queued now, at most MAX_JOBS_PER_CALL (the loop sends the rest at once);
        returns, per run, whether its lease held."""
        batch = self._take()
        if not batch:
            return []
        ack_ns = time.time_ns()
        try:
            result = await self.outages.settle(self._op(batch), budget_s=None,
                                               call=self.connection.run)
        except asyncio.CancelledError:  # the worker stopped before Redis came back
            for run in batch:
                self.on_settled(run)
                self.outcomes.record(run, "lease_lost", error="ack not delivered before shutdown")
            raise
        return self._settled(batch, result, ack_ns)

    def _take(self) -> list[Run]:
        batch = self._pending[:scripts.MAX_JOBS_PER_CALL]
        self._pending = self._pending[scripts.MAX_JOBS_PER_CALL:]
        return batch

    def _op(self, batch: list[Run]) -> Op[AckResult]:
        return ack_op(self.queue, [run.lease for run in batch], worker_id=self.worker_id,
                      retry_window_ms=self.retry_window_ms)

    def _settled(self, batch: list[Run], result: AckResult, ack_ns: int) -> list[bool]:
        """Reports each run of an answered ack; returns, per run, whether its lease held."""
        held, acked_at_ms = result.held, result.now_ms
        acked_ns = time.time_ns()
        for run, ok in zip(batch, held, strict=True):
            if tracing.recording():
                tracing.record_span("antre.ack", ack_ns, acked_ns, {
                    "antre.job.id": run.claimed.id, "antre.batch": len(batch)},
                    parent=run.trace_parent,
                    error=None if ok else "lease lost")
            self.on_settled(run)
            if ok:
                self.outcomes.record(run, "succeeded", acked_at_ms=acked_at_ms)
            else:
                self.outcomes.record(run, "lease_lost", error="lease not held at the ack")
        return held

    async def run(self) -> None:
        while True:
            await self._ready.wait()
            self._ready.clear()
            while self._pending:
                self._idle.clear()
                await self.step()
            self._idle.set()

    async def flush(self, budget_s: float = 10.0) -> None:
        """Waits, for up to ``budget_s``, until every queued ack has been sent (shutdown)."""
        deadline = time.monotonic() + budget_s
        while ((self._pending or self._riding or not self._idle.is_set())
               and time.monotonic() < deadline):
            self._ready.set()
            await asyncio.sleep(0.01)

    async def close(self) -> None:
        """Gives the batcher's connection back to the pool (once its loop has ended)."""
        await self.connection.release()
