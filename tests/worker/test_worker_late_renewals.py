"""A renewal whose reply comes back after its run's local deadline (a stalled reply, a GC pause,
a CPU-starved pod): Redis extended the lease by a whole lease, while the worker had already
abandoned the run. Before, the job then sat in ``processing``, run by nobody, until that lease
expired (a visibility timeout), its resource locked all along. The worker now gives such a
lease back at once: the job goes back to the head of the queue, its resource lock kept only
while the abandoned run may still be going. A renewal whose reply is lost instead gives
nothing back: the worker cannot tell it from one that never ran.

Each test runs real workers against the test redis-server, one of them through a proxy that
holds the replies of the heartbeat's connection, then delivers them late or cuts them.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import threading
import time
from collections.abc import AsyncIterator
from typing import Any

import pytest
from antre import HandlerRegistry, Job, Queue
from antre.connection import connect_async
from antre.protocol import scripts
from antre.protocol.claim import claim_op
from antre.protocol.scripts import load
from antre.runs import Run
from antre.settings import WorkerSettings
from antre.worker import Worker
from invariants import assert_invariants, read_record
from reply_cutter import ReplyCutter
from worker_harness import eventually, running_worker, status_of

#: The lease of the worker whose renewal comes back late: a beat every 2/3 s.
LEASE_S = 2.0


def lifecycle(caplog: Any, job_id: str) -> list[tuple[str, str]]:
    """The lifecycle events logged for ``job_id``, as (worker, event)."""
    return [(r.worker_id, r.event) for r in caplog.records
            if r.name == "antre.lifecycle" and getattr(r, "job_id", None) == job_id]


def printer_handlers(kind: str, may_end: threading.Event,
                     ) -> tuple[HandlerRegistry, list[tuple[float, float]], list[float]]:
    """A ``print`` handler whose first run never ends by itself and whose later runs are quick;
    returns the registry, the (start, end) of each run that ended, and the start of each run.
    The first run: ``async`` ends when cancelled; ``async-ending``, cancelled, still cleans up
    until ``may_end`` is set; ``thread`` (a plain ``def``) returns once ``may_end`` is set."""
    registry = HandlerRegistry()
    spans: list[tuple[float, float]] = []
    starts: list[float] = []

    if kind.startswith("async"):
        @registry.handler("print")
        async def print_async(job: Job) -> None:
            began = time.monotonic()
            starts.append(began)
            try:
                if len(starts) == 1:
                    await asyncio.Event().wait()  # until cancelled at its deadline
            except asyncio.CancelledError:
                if kind == "async-ending":
                    await asyncio.to_thread(may_end.wait, 30)
                raise
            finally:
                spans.append((began, time.monotonic()))
    else:
        @registry.handler("print")
        def print_in_thread(job: Job) -> None:
            began = time.monotonic()
            starts.append(began)
            if len(starts) == 1:
                may_end.wait(30)  # a thread cannot be stopped
            spans.append((began, time.monotonic()))

    return registry, spans, starts


async def lock_held_until(redis_client: Any, lock_key: str, job_id: str, *,
                          until_ms: float) -> None:
    """Checks, until Redis's clock reaches ``until_ms``, that ``job_id`` holds ``lock_key``."""
    while True:
        holder = redis_client.get(lock_key)
        assert holder is not None and holder.startswith(f"{job_id}:"), (
            f"the kept lock is gone or taken: {holder!r}")
        seconds, micros = redis_client.time()
        if seconds * 1000 + micros // 1000 >= until_ms:
            return
        await asyncio.sleep(0.05)


@contextlib.asynccontextmanager
async def abandoned_behind_a_held_renewal(
        redis_client: Any, redis_url: str, aredis: Any, qs: Any, registry: HandlerRegistry,
        job_id: str, starts: list[float]) -> AsyncIterator[tuple[ReplyCutter, float]]:
    """Runs worker ``w-late`` through the proxy, and ``w-other`` beside it waiting for work,
    until ``w-late`` has abandoned the run of ``job_id`` at its deadline while the reply of a
    renewal that extended the lease in Redis is held; yields the proxy and the deadline that
    renewal set (ms, Redis clock)."""
    redis_port = int(redis_url.rsplit(":", 1)[1].split("/")[0])
    # No reaper pass within the test: only a give-back can put the job back.
    quiet = {"reaper_interval_s": 60.0, "concurrency": 1, "prefetch": 0}
    async with ReplyCutter(redis_port) as cutter:
        client = connect_async(cutter.url)
        try:
            async with running_worker(client, qs, registry, worker_id="w-late",
                                      visibility_timeout_s=LEASE_S, **quiet) as late:
                await eventually(lambda: late.in_flight == 1 and starts,
                                 message="the first run going")
                # A wait for the printer lasts until the lock is freed (its unlock wakes the
                # job), not a re-check.
                async with running_worker(aredis, qs, registry, worker_id="w-other",
                                          lock_defer_s=10.0, **quiet):
                    cutter.hold_replies_after(load("extend_lease").sha.encode())
                    await asyncio.wait_for(cutter.holding.wait(), 5)
                    # The held renewal ran in Redis; the worker, waiting for its reply, reaches
                    # the run's deadline and abandons it.
                    await eventually(lambda: late.in_flight == 0, timeout_s=LEASE_S * 2,
                                     message="the run abandoned at its deadline")
                    renewed_until = redis_client.zscore(qs.keys.processing, job_id)
                    seconds, micros = redis_client.time()
                    now_ms = seconds * 1000 + micros // 1000
                    assert renewed_until is not None and renewed_until > now_ms, (
                        "the held renewal should have extended the lease in Redis")
                    assert read_record(redis_client, qs, job_id)["worker"] == "w-late"
                    yield cutter, renewed_until
        finally:
            await client.aclose()


@pytest.mark.parametrize("kind", ["async", "async-ending", "thread"])
async def test_a_lease_renewed_after_its_run_was_abandoned_is_given_back_at_once(
        redis_client, redis_url, aredis, qs, caplog, kind):
    caplog.set_level(logging.INFO, logger="antre")
    may_end = threading.Event()
    registry, spans, starts = printer_handlers(kind, may_end)
    queue = Queue(redis_client, settings=qs)
    job_id = queue.enqueue("print", resource_key="printer").job_id
    try:
        async with abandoned_behind_a_held_renewal(redis_client, redis_url, aredis, qs,
                                                   registry, job_id, starts) as (cutter, until):
            cutter.deliver()
            history = await eventually(
                lambda: [e for e in queue.get(job_id).history if e.event == "released"],
                timeout_s=LEASE_S * 3, message="the lease given back")
            [released] = history
            assert released.worker == "w-late"
            assert released.at_ms < until, "given back only when the renewed lease ran out"
            if kind in ("thread", "async-ending"):
                # The thread still runs, or the cancelled handler still ends: its lock is
                # kept, so the next run of the job waits for it instead of starting beside it.
                await eventually(lambda: status_of(redis_client, qs, job_id) == "scheduled",
                                 message="the next run deferred")
                # Held past the lease the late renewal gave it: the heartbeat extends the
                # kept lock for as long as the handler goes on, thread or task alike.
                await lock_held_until(redis_client, qs.keys.lock_prefix + "printer", job_id,
                                      until_ms=until + LEASE_S * 1000 * 1.5)
                assert len(starts) == 1
                may_end.set()
            await eventually(lambda: status_of(redis_client, qs, job_id) == "done",
                             timeout_s=10, message="the job run again")
    finally:
        may_end.set()

    assert len(starts) == 2
    ordered = sorted(spans)
    for before, after in itertools.pairwise(ordered):
        assert after[0] >= before[1], f"two runs on the printer at once: {ordered}"
    info = queue.get(job_id)
    events = [e.event for e in info.history if e.event not in ("extended", "deferred")]
    assert events == ["enqueued", "claimed", "released", "claimed", "acked"]
    # Given back as a run interrupted at a stop is: its attempt refunded (a free release).
    assert info.attempt == 1
    assert queue.stats().counters.get("released") == 1
    # The operator sees one outcome for the abandoned run: released, not lease_lost as well.
    assert [event for worker, event in lifecycle(caplog, job_id) if worker == "w-late"] == [
        "released"]
    assert any(r.getMessage().startswith("a lease renewal came back after its run's deadline")
               for r in caplog.records)
    assert_invariants(redis_client, qs)


async def test_a_renewal_whose_reply_is_lost_gives_nothing_back(redis_client, redis_url, aredis,
                                                                qs, caplog):
    """The worker cannot tell a renewal whose reply never came from one that never ran: the
    run stays lost (``lease_lost``, once) and its job waits for its lease to expire."""
    caplog.set_level(logging.INFO, logger="antre")
    registry, _, starts = printer_handlers("async", threading.Event())
    queue = Queue(redis_client, settings=qs)
    job_id = queue.enqueue("print", resource_key="printer").job_id
    async with abandoned_behind_a_held_renewal(redis_client, redis_url, aredis, qs,
                                               registry, job_id, starts) as (cutter, until):
        assert lifecycle(caplog, job_id) == [], "the outcome waits for the renewal's answer"
        cutter.cut()
        await eventually(lambda: lifecycle(caplog, job_id), message="the run's outcome")
        assert lifecycle(caplog, job_id) == [("w-late", "lease_lost")]
        assert redis_client.zscore(qs.keys.processing, job_id) == until
        assert [e.event for e in queue.get(job_id).history if e.event != "extended"] == [
            "enqueued", "claimed"]
    assert len(starts) == 1


async def test_a_prefetched_run_given_back_after_a_late_renewal_is_released_unstarted(
        redis_client, aredis, qs):
    """A prefetched run never started (a freeze of most of a lease: its deadline and the
    renewal's reply come due together) is given back like every run a late renewal kept. It
    never ran, so its release must not count among the job's releases, which spend its attempt
    after the third: here a job with one attempt, given back four times without ever running,
    must still be queued, its attempt unspent, not dead-lettered."""
    queue = Queue(redis_client, settings=qs)
    job_id = queue.enqueue("print", max_attempts=1).job_id
    worker = Worker(aredis, qs, WorkerSettings(visibility_timeout_s=LEASE_S), HandlerRegistry(),
                    worker_id="w-frozen")
    try:
        for _ in range(4):
            sent_at = time.monotonic()
            [claimed] = (await scripts.run_async(aredis, claim_op(
                qs, worker.settings, worker_id=worker.worker_id, max_jobs=1))).jobs
            run = Run(claimed)  # prefetched: no task, never started
            worker.held.add([run], claim_sent_at=sent_at)
            worker.late_renewals.give_back_soon([run])
            await worker.late_renewals.finish()
            assert status_of(redis_client, qs, job_id) == "queued"
    finally:
        worker.threads.shutdown()
    record = read_record(redis_client, qs, job_id)
    assert "releases" not in record, "a run that never started counted as a release"
    assert (record["status"], record["attempt"]) == ("queued", "0")
