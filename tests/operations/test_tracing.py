"""OpenTelemetry spans from producer to worker, with an in-memory SDK exporter.

Covers: POST /v1/queues/<q>/jobs opens ``antre.enqueue`` and stores its context in the job;
a real in-process worker then records ``antre.claim``, ``antre.lock`` (resource key),
``antre.handler`` (a consumer span whose parent is the enqueue span) and ``antre.ack``, all in the
producer's trace; a failing handler's span carries the error status; a job enqueued outside
any trace is still one trace per run, rooted at its claim. Without an SDK provider, nothing is
recorded and no headers are added.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Iterator
from typing import Any

import pytest
from antre import HandlerRegistry, Permanent, Queue, QueueSettings, WorkerSettings, tracing
from antre.worker import Worker
from api.conftest import api_client_for
from redis_servers import eventually

otel_sdk = pytest.importorskip("opentelemetry.sdk.trace")
from opentelemetry import trace  # noqa: E402
from opentelemetry.sdk.trace.export import SimpleSpanProcessor  # noqa: E402
from opentelemetry.sdk.trace.export.in_memory_span_exporter import (  # noqa: E402
    InMemorySpanExporter,
)

EXPORTER = InMemorySpanExporter()


@pytest.fixture(scope="module")
def exporter() -> Iterator[InMemorySpanExporter]:
    # The global provider can be set once per process. Afterwards the exporter is shut down,
    # so later tests in the session keep no spans (the SDK still builds them: a little CPU).
    if isinstance(trace.get_tracer_provider(), trace.ProxyTracerProvider):
        provider = otel_sdk.TracerProvider()
        provider.add_span_processor(SimpleSpanProcessor(EXPORTER))
        trace.set_tracer_provider(provider)
    yield EXPORTER
    EXPORTER.clear()
    EXPORTER.shutdown()


@contextlib.asynccontextmanager
async def running_worker(redis_url: str, registry: HandlerRegistry) -> AsyncIterator[Worker]:
    from antre.connection import connect_async
    client = connect_async(redis_url)
    worker = Worker(client, QueueSettings(name="tq"), WorkerSettings(
        visibility_timeout_s=5, reaper_interval_s=0.2, concurrency=2), registry, worker_id="tw")
    task = asyncio.create_task(worker.run())
    try:
        yield worker
    finally:
        worker.stop()
        await asyncio.wait_for(task, 15)
        await client.aclose()


async def test_spans_follow_the_job_from_producer_to_worker(
        exporter: InMemorySpanExporter, redis_client: Any, redis_url: str) -> None:
    exporter.clear()
    registry = HandlerRegistry()

    @registry.handler("ok")
    async def ok(job: Any) -> None:
        return None

    @registry.handler("bad")
    async def bad(job: Any) -> None:
        raise Permanent("broken input")

    async with api_client_for(redis_url, queues=("tq",)) as client:
        first = await (await client.post("/v1/queues/tq/jobs", json={
            "type": "ok", "resource_key": "acct-1"})).json()
        second = await (await client.post("/v1/queues/tq/jobs", json={"type": "bad"})).json()
    queue = Queue(redis_client, "tq")
    async with running_worker(redis_url, registry):
        await eventually(lambda: queue.get(first["job_id"]).status == "done"
                         and queue.get(second["job_id"]).status == "dead")
        await eventually(lambda: any(s.name == "antre.ack" for s in exporter.get_finished_spans()))

    spans = exporter.get_finished_spans()
    [enqueue_ok, enqueue_bad] = [s for s in spans if s.name == "antre.enqueue"]
    trace_ok = [s for s in spans if s.context.trace_id == enqueue_ok.context.trace_id]
    assert sorted(s.name for s in trace_ok) == ["antre.ack", "antre.claim", "antre.enqueue",
                                                 "antre.handler", "antre.lock"]
    handler = next(s for s in trace_ok if s.name == "antre.handler")
    assert handler.parent is not None and handler.parent.span_id == enqueue_ok.context.span_id
    assert handler.kind == trace.SpanKind.CONSUMER
    assert handler.attributes["antre.job.id"] == first["job_id"]
    lock = next(s for s in trace_ok if s.name == "antre.lock")
    assert lock.attributes["antre.resource_key"] == "acct-1"

    trace_bad = [s for s in spans if s.context.trace_id == enqueue_bad.context.trace_id]
    failed = next(s for s in trace_bad if s.name == "antre.handler")
    assert failed.status.status_code == trace.StatusCode.ERROR
    assert "broken input" in (failed.status.description or "")


async def test_a_job_enqueued_outside_any_trace_is_one_trace_from_its_claim(
        exporter: InMemorySpanExporter, redis_client: Any, redis_url: str) -> None:
    """A producer with no active span (a script, a cron job) stores no context: the run's
    claim, lock, handler and ack are still one trace, rooted at the claim, not four traces."""
    exporter.clear()
    registry = HandlerRegistry()

    @registry.handler("ok")
    async def ok(job: Any) -> None:
        return None

    queue = Queue(redis_client, "tq")
    job_id = queue.enqueue("ok", {}, resource_key="acct-2").job_id
    async with running_worker(redis_url, registry):
        await eventually(lambda: queue.get(job_id).status == "done")
        await eventually(lambda: any(s.name == "antre.ack" for s in exporter.get_finished_spans()))

    spans = [s for s in exporter.get_finished_spans() if s.attributes.get("antre.job.id") == job_id]
    assert sorted(s.name for s in spans) == ["antre.ack", "antre.claim", "antre.handler",
                                             "antre.lock"]
    claim = next(s for s in spans if s.name == "antre.claim")
    assert claim.parent is None  # the root
    assert {s.context.trace_id for s in spans} == {claim.context.trace_id}
    assert all(s.parent is not None and s.parent.span_id == claim.context.span_id
               for s in spans if s is not claim)


def test_without_an_active_span_nothing_is_injected() -> None:
    assert tracing.inject() == {}
    assert tracing.job_context("") == {} and tracing.job_context("not json") == {}


def test_job_context_keeps_only_string_trace_headers() -> None:
    from antre import tracing as tracing_module
    assert tracing_module.job_context('{"traceparent": 5, "tracestate": "a=b", "x": "y"}') == {
        "tracestate": "a=b"}
    assert tracing_module.job_context('["traceparent"]') == {}
    assert tracing_module.job_context("{bad") == {}
