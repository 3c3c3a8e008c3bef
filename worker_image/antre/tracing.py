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
from collections.abc import Iterator, Mapping
from typing import Any, Final

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
    if not ENABLED:
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
    if not ENABLED:
        return {}
    carrier: dict[str, str] = {}
    propagate.inject(carrier, context=otel_context.get_current())
    return carrier


def set_error(current: Any, message: str) -> None:
    """Marks ``current`` (a span from :func:`span`) as failed without an exception object."""
    if ENABLED and current is not None:
        current.set_status(Status(StatusCode.ERROR, message))
