"""The worker's lifecycle log at each level: failures get a line each, successes are counted in a
``settled`` summary at INFO (periodic and at shutdown) and get a line each only at DEBUG."""

from __future__ import annotations

import logging

import pytest
from antre import Permanent, Queue, logs
from antre.handlers import HandlerRegistry
from antre.jobs import ClaimedJob
from antre.outcomes import Outcomes
from antre.runs import Run
from worker_harness import eventually, running_worker, status_of


def lifecycle(caplog: pytest.LogCaptureFixture, event: str) -> list[logging.LogRecord]:
    return [r for r in caplog.records
            if r.name == "antre.lifecycle" and getattr(r, "event", None) == event]


@pytest.mark.parametrize("level", [pytest.param(logging.INFO, id="info"),
                                   pytest.param(logging.DEBUG, id="debug")])
async def test_successes_are_summarised_failures_logged_one_by_one(redis_client, aredis, qs,
                                                                    caplog, level):
    caplog.set_level(level, logger="antre")
    registry = HandlerRegistry()

    @registry.handler("ok")
    async def ok(job: object) -> None:
        pass

    @registry.handler("broken")
    async def broken(job: object) -> None:
        raise Permanent("cannot ever work")

    queue = Queue(redis_client, settings=qs)
    ids = [queue.enqueue("ok").job_id for _ in range(5)] + [queue.enqueue("broken").job_id]
    async with running_worker(aredis, qs, registry):
        await eventually(lambda: [status_of(redis_client, qs, i) for i in ids]
                         == ["done"] * 5 + ["dead"])
    [dead] = lifecycle(caplog, "dead")
    assert dead.job_id == ids[-1] and "cannot ever work" in dead.error
    [settled] = lifecycle(caplog, "settled")  # the worker ran for less than the interval
    assert (settled.levelno, settled.acked, settled.dead, settled.queue) == (
        logging.INFO, 5, 1, qs.name)
    acked = lifecycle(caplog, "acked")
    assert sorted(r.job_id for r in acked) == (sorted(ids[:5]) if level == logging.DEBUG else [])


def test_a_summary_at_most_every_interval_counts_what_came_since(caplog):
    caplog.set_level(logging.INFO, logger="antre")
    job = ClaimedJob(id="j", type="t", payload_json="null", attempt=1, max_attempts=5, lease=1,
                     idempotency_key=None, resource_key=None, created_at_ms=0, headers_json="")
    outcomes = Outcomes("q", "w1", None, summary_interval_s=0.0)
    outcomes.record(Run(job), "succeeded")
    outcomes.record(Run(job), "retried", error="boom")
    assert [(r.acked if hasattr(r, "acked") else 0, getattr(r, "retrying", 0))
            for r in lifecycle(caplog, "settled")] == [(1, 0), (0, 1)]
    outcomes.log_summary()  # nothing since the last line: no line
    assert len(lifecycle(caplog, "settled")) == 2


@pytest.mark.parametrize(("text", "level"), [
    ("warn", logging.WARNING), ("WARN", logging.WARNING), ("fatal", logging.CRITICAL),
    ("NOTSET", logging.DEBUG), (" info ", logging.INFO), ("Debug", logging.DEBUG)])
def test_the_level_names_python_takes_still_work(text: str, level: int) -> None:
    """A second read found ANTRE_LOG_LEVEL=WARN (which Python's logging takes, and which worked
    before levels were checked) refused: a deployment with it would stop starting."""
    assert logs.level_of(text) == level
