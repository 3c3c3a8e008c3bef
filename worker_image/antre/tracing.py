"""Optional OpenTelemetry spans: enqueue, claim, lock, handler and ack.

With the ``otel`` extra installed (``opentelemetry-api``), spans go to whatever tracer provider
the application configured; without it every function here is a cheap no-op, so callers never
test for the package themselves.

The producer's context travels to the worker inside the job: :func:`inject` returns the W3C
``traceparent`` (and ``tracestate``) headers, which the enqueue stores in the job's ``headers``
field, and the worker starts its handler span with :func:`span` ``(parent=job.headers)``.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterator, Mapping
from typing import Any, Final

from antre.jobs import ClaimedJob

try:
    from opentelemetry import context as otel_context
    from opentelemetry import propagate, trace
    from opentelemetry.trace import SpanKind, Status, StatusCode
except ImportError:  # the otel extra is not installed
    trace = None  # type: ignore[assignment]

ENABLED: Final = trace is not None
TRACER_NAME: Final = "antre"

AttributeValue = str | int | float | bool


@contextlib.contextmanager
def span(name: str, attributes: Mapping[str, AttributeValue | None] | None = None, *,
         parent: Mapping[str, str] | None = None, kind: str = "internal") -> Iterator[Any]:
    """A span named ``name`` around the block (``None`` attributes are dropped).

    ``parent``: carrier headers from :func:`inject` (a job's headers) to continue a remote trace.
    ``kind``: "internal", "producer" or "consumer". An exception raised in the block is recorded
    on the span and marks it as an error, then propagates.
    """
    if not recording():  # no provider: skip the per-job work of a span nobody keeps
        yield None
        return
    tracer = trace.get_tracer(TRACER_NAME)
    ctx = propagate.extract(dict(parent)) if parent else None
    span_kind = {"producer": SpanKind.PRODUCER, "consumer": SpanKind.CONSUMER}.get(
        kind, SpanKind.INTERNAL)
    attrs = {k: v for k, v in (attributes or {}).items() if v is not None}
    with tracer.start_as_current_span(name, context=ctx, kind=span_kind, attributes=attrs,
                                      record_exception=False,
                                      set_status_on_exception=False) as current:
        try:
            yield current
        except BaseException as exc:
            current.record_exception(exc)
            current.set_status(Status(StatusCode.ERROR, f"{type(exc).__name__}: {exc}"))
            raise


def inject() -> dict[str, str]:
    """The current trace context as headers to store in a job (empty when tracing is off or
    there is no active span)."""
    if not recording():
        return {}
    carrier: dict[str, str] = {}
    propagate.inject(carrier, context=otel_context.get_current())
    return carrier


def recording() -> bool:
    """True when spans go somewhere: the API is installed and an SDK provider is configured.
    The worker checks this before doing per-job work for spans it would throw away."""
    return ENABLED and not isinstance(trace.get_tracer_provider(), trace.ProxyTracerProvider)


def job_context(headers_json: str) -> dict[str, str]:
    """The trace headers stored in a job (its ``headers`` field, JSON), or {}."""
    if not headers_json:
        return {}
    try:
        headers = json.loads(headers_json)
    except ValueError:
        return {}
    # Only strings: the propagator fails on anything else, and headers are producer data.
    return {k: v for k, v in headers.items()
            if k in ("traceparent", "tracestate") and isinstance(v, str)} \
        if isinstance(headers, dict) else {}


def record_span(name: str, start_ns: int, end_ns: int,
                attributes: Mapping[str, AttributeValue | None] | None = None, *,
                parent: Mapping[str, str] | None = None, error: str | None = None) -> Any:
    """Records an already finished operation (timed by the caller) as a span, for work done
    for many jobs at once (one claim or ack call) that belongs to each job's own trace.
    Returns the span (None when nothing is recorded)."""
    if not recording():
        return None
    tracer = trace.get_tracer(TRACER_NAME)
    ctx = propagate.extract(dict(parent)) if parent else None
    attrs = {k: v for k, v in (attributes or {}).items() if v is not None}
    current = tracer.start_span(name, context=ctx, attributes=attrs, start_time=start_ns)
    if error:
        current.set_status(Status(StatusCode.ERROR, error))
    current.end(end_time=end_ns)
    return current


def record_claim(queue: str, job: ClaimedJob, start_ns: int, end_ns: int) -> dict[str, str]:
    """The claim of ``job`` and, when it has a resource key, the lock the claim took. Returns
    the parent of the run's later spans (handler, ack): the producer's context stored in the
    job, or, for a job enqueued outside any trace, this claim span's, so that one run is still
    one trace rather than a trace per span. Empty when nothing is recorded."""
    if not recording():
        return {}
    parent = job_context(job.headers_json)
    attrs: dict[str, AttributeValue | None] = {"antre.queue": queue, "antre.job.id": job.id,
                                               "antre.job.type": job.type,
                                               "antre.job.attempt": job.attempt}
    claim = record_span("antre.claim", start_ns, end_ns, attrs, parent=parent)
    if not parent:
        parent = {}
        propagate.inject(parent, context=trace.set_span_in_context(claim))
    if job.resource_key:
        record_span("antre.lock", start_ns, end_ns, {**attrs, "antre.resource_key":
                                                     job.resource_key}, parent=parent)
    return parent


def set_error(current: Any, message: str) -> None:
    """Marks ``current`` (a span from :func:`span`) as failed without an exception object."""
    if ENABLED and current is not None:
        current.set_status(Status(StatusCode.ERROR, message))
