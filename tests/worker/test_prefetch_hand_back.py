"""A worker whose work turns long hands back the jobs it prefetched while it was short
(antre.prefetch): they go back to the head of the queue unstarted, their attempt refunded, and
an idle worker starts them at once instead of after the long jobs holding every slot.

Covers: worker a (2 slots) drains short jobs, so it prefetches, and the long jobs behind them
fill its slots and its buffer; worker b, idle, starts a's prefetched jobs within half a second
while a's long jobs still run, for ``def`` handlers (armed runs a returning thread could start)
and ``async def`` ones; every job runs once, the handed-back ones on b with their attempt
refunded; the hand-backs are told apart from shutdown releases everywhere: the history event,
the queue's stats counter, a's outcome metric and its lifecycle log (DEBUG: they are routine)
say ``handed_back``, and nothing says ``released``; the queue's invariants hold.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from typing import Any

import pytest
from antre import HandlerRegistry, Job, Queue
from antre.metrics import WorkerMetrics
from antre.settling import HAND_BACK_REASON
from invariants import assert_invariants
from worker_harness import eventually, running_worker

#: Short jobs first, so worker a has measured its pace and prefetches.
WARM_UP = 40
LONG = 4
#: Far shorter than a long job (held until the test ends it, up to 20 s).
START_BOUND_S = 0.5


class Handlers:
    """``quick`` returns at once; ``long`` notes which worker started it and waits for the
    gate. ``def`` handlers or ``async def`` ones."""

    def __init__(self, *, is_async: bool) -> None:
        self.is_async = is_async
        self.gate = threading.Event()
        self.agate = asyncio.Event()
        self.started: list[tuple[str, str]] = []

    def open(self) -> None:
        self.gate.set()
        self.agate.set()

    def registry(self, name: str) -> HandlerRegistry:
        registry = HandlerRegistry()
        if self.is_async:
            @registry.handler("quick")
            async def quick_async(job: Job) -> None:
                pass

            @registry.handler("long")
            async def long_async(job: Job) -> None:
                self.started.append((job.id, name))
                await asyncio.wait_for(self.agate.wait(), 20)
        else:
            @registry.handler("quick")
            def quick(job: Job) -> None:
                pass

            @registry.handler("long")
            def long(job: Job) -> None:
                self.started.append((job.id, name))
                self.gate.wait(20)
        return registry

    def on(self, name: str) -> list[str]:
        return [job_id for job_id, worker in self.started if worker == name]


@pytest.mark.parametrize("is_async", [False, True], ids=["def", "async-def"])
async def test_prefetched_jobs_are_handed_back_when_the_work_turns_long(
        redis_client: Any, aredis: Any, qs: Any, is_async: bool,
        caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG, logger="antre.lifecycle")
    handlers = Handlers(is_async=is_async)
    queue = Queue(redis_client, settings=qs)
    metrics = {name: WorkerMetrics(qs.name) for name in ("a", "b")}
    try:
        async with running_worker(aredis, qs, handlers.registry("a"), worker_id="a",
                                  concurrency=2, prefetch=2, metrics=metrics["a"]):
            results = queue.enqueue_many([{"type": "quick"}] * WARM_UP + [{"type": "long"}] * LONG)
            long_ids = [result.job_id for result in results[WARM_UP:]]
            await eventually(lambda: len(handlers.on("a")) == 2,
                             message="a's two slots busy with long jobs")
            async with running_worker(aredis, qs, handlers.registry("b"), worker_id="b",
                                      concurrency=LONG, metrics=metrics["b"]):
                await eventually(lambda: len(handlers.started) == LONG, timeout_s=START_BOUND_S,
                                 message="b to start every long job a is not running")
                assert len(handlers.on("a")) == 2, "a's slots still busy with their long jobs"
                handlers.open()
                await eventually(lambda: all(queue.get(job_id).status == "done"
                                             for job_id in long_ids),
                                 message="every long job done")
    finally:
        handlers.open()
    assert sorted(job_id for job_id, _ in handlers.started) == sorted(long_ids), "each ran once"
    handed_back = []
    for job_id in handlers.on("b"):
        info = queue.get(job_id)
        events = [(e.event, e.worker) for e in info.history if e.event != "extended"]
        if events[1] == ("claimed", "a"):
            handed_back.append(job_id)
            assert events == [("enqueued", None), ("claimed", "a"), ("handed_back", "a"),
                              ("claimed", "b"), ("acked", "b")]
            assert info.history[2].error == HAND_BACK_REASON
            assert info.attempt == 1, "the hand-back refunds the attempt of a job never started"
    assert handed_back, "a prefetched a long job and handed it back"
    # Counted apart from shutdown releases: in Redis, in the workers' metrics and logs.
    def outcomes(name: str, *, worker: str | None = None, job_type: str | None = None) -> float:
        return sum(float(metrics[w].jobs.labels(qs.name, t, name)._value.get())
                   for w in ([worker] if worker else metrics)
                   for t in ([job_type] if job_type else ("quick", "long")))

    counters = queue.stats().counters
    assert "released" not in counters and outcomes("released") == 0
    assert counters["handed_back"] == outcomes("handed_back")
    assert outcomes("handed_back", worker="a", job_type="long") == len(handed_back)
    lines = [r for r in caplog.records if r.name == "antre.lifecycle"]
    handed_back_lines = [r for r in lines if getattr(r, "event", None) == "handed_back"]
    assert {r.job_id for r in handed_back_lines} >= set(handed_back)
    assert {r.levelno for r in handed_back_lines} == {logging.DEBUG}
    assert not [r for r in lines if getattr(r, "event", None) == "released"]
    assert_invariants(redis_client, qs)
