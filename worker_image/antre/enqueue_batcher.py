"""The enqueue batcher: concurrent ``AsyncQueue.enqueue`` calls share script calls.

An async producer (a web service enqueuing from many requests at once) makes many enqueues that
are in flight together. Each joins a batch instead of making its own round trip: the enqueues
that arrive in one turn of the event loop, and those that arrive while a call is in flight, go
together as one ``enqueue_many`` script call (at most MAX_JOBS_PER_CALL jobs; more go as the
next calls, in arrival order). One call is in flight at a time per queue.

Each caller still gets exactly what its own call would have given:

- its own result (its job id, or the job its idempotency key already names): the script handles
  a batch's jobs in order, as it would separate calls, so a key used twice in one batch returns
  the first job to the second caller with ``created`` False;
- its own refusal: the script refuses a whole call when one job is unusable (an idempotency key
  reused for another request, a key of the wrong type) and writes nothing, so the jobs of such a
  batch are then sent again one per call (but for callers cancelled meanwhile), and only the
  caller at fault gets the error;
- the error of a call that failed for all (Redis unreachable, out of memory), which reaches every
  caller of the batch; a durable queue's NotReplicated carries each caller's own result;
- its reply only after Redis has its job. A caller cancelled before its batch was sent is left
  out of it; one cancelled later may find its job written, as with any cancelled request.
"""

from __future__ import annotations

import asyncio
from typing import Any

from antre import errors
from antre.jobs import EnqueueResult
from antre.protocol import scripts
from antre.protocol.enqueue import BATCH_SIZE, EnqueueCalls
from antre.protocol.scripts import ScriptArg

_Waiting = tuple[list[ScriptArg], "asyncio.Future[EnqueueResult]"]


class EnqueueBatcher:
    """Sends the enqueues of one queue's asyncio client in shared script calls."""

    def __init__(self, redis_client: Any, calls: EnqueueCalls) -> None:
        self.redis = redis_client
        self.calls = calls
        self._waiting: list[_Waiting] = []
        self._sender: asyncio.Task[None] | None = None
        self._loop: asyncio.AbstractEventLoop | None = None

    async def enqueue(self, job_args: list[ScriptArg]) -> EnqueueResult:
        """Enqueues one job given its :func:`antre.protocol.enqueue.encode` arguments."""
        loop = asyncio.get_running_loop()
        if loop is not self._loop:  # a client used from a new event loop starts afresh
            self._loop, self._waiting, self._sender = loop, [], None
        future: asyncio.Future[EnqueueResult] = loop.create_future()
        self._waiting.append((job_args, future))
        if self._sender is None or self._sender.done():
            # A task, not a direct send: it starts after every enqueue already scheduled in
            # this turn of the loop has joined the batch.
            self._sender = loop.create_task(self._send_waiting())
        return await future

    async def wait_idle(self) -> None:
        """Returns once every enqueue made so far has been answered."""
        sender = self._sender
        if sender is not None and sender.get_loop() is asyncio.get_running_loop():
            await asyncio.shield(sender)

    async def _send_waiting(self) -> None:
        while self._waiting:
            batch = self._waiting[:BATCH_SIZE]
            del self._waiting[:BATCH_SIZE]
            batch = [(job_args, future) for job_args, future in batch if not future.done()]
            if not batch:
                continue
            try:
                await self._send(batch)
            except Exception as exc:  # not a Redis error (those are answered in _send)
                _fail(batch, exc)
            except BaseException:  # cancelled with the loop: nobody may wait forever
                for _, future in [*batch, *self._waiting]:
                    future.cancel()
                self._waiting.clear()
                raise

    async def _send(self, batch: list[_Waiting]) -> None:
        [op] = self.calls.ops_of_encoded([job_args for job_args, _ in batch])
        try:
            results = await scripts.run_async(self.redis, op)
        except (errors.IdempotencyConflict, errors.InvalidArgument) as exc:
            if len(batch) == 1:
                _fail(batch, exc)
                return
            # Nothing of the batch was written: each job alone gets its own answer. A caller
            # cancelled meanwhile was answered already: its job is not written after that.
            for waiting in batch:
                if not waiting[1].done():
                    await self._send([waiting])
            return
        except errors.NotReplicated as exc:
            replicated: list[EnqueueResult] = exc.result  # type: ignore[assignment]
            for (_, future), result in zip(batch, replicated, strict=True):
                if not future.done():
                    future.set_exception(errors.NotReplicated(
                        str(exc), confirmed=exc.confirmed, wanted=exc.wanted, result=[result]))
            return
        except Exception as exc:
            _fail(batch, exc)
            return
        for (_, future), result in zip(batch, results, strict=True):
            if not future.done():
                future.set_result(result)


def _fail(batch: list[_Waiting], exc: Exception) -> None:
    for _, future in batch:
        if not future.done():
            future.set_exception(exc)
