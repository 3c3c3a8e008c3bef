"""Probes, /metrics and the OpenAPI document.

Covers: /healthz and /readyz, the depth gauges and request counters on /metrics (a method the
client chooses beyond the usual seven is counted as "other"), and that the document is OpenAPI
3.1 and lists every route the application serves.
"""

from __future__ import annotations

from typing import Any

from antre import Queue


async def test_health_and_ready(client: Any) -> None:
    assert await (await client.get("/healthz")).json() == {"status": "ok"}
    assert await (await client.get("/readyz")).json() == {"status": "ready"}


async def test_metrics_report_depth_and_requests(client: Any, redis_client: Any) -> None:
    Queue(redis_client, "default").enqueue_many([("t", i) for i in range(3)])
    await client.post("/v1/queues/default/jobs", json={"type": "t"})
    text = await (await client.get("/metrics")).text()
    assert 'antre_queue_jobs{queue="default",state="ready"} 4.0' in text
    assert 'antre_queue_events_total{event="enqueued",queue="default"} 4.0' in text
    assert 'antre_queue_depth_up{queue="default"} 1.0' in text
    assert ('antre_api_requests_total{method="POST",route="/v1/queues/{queue}/jobs",'
            'status="202"} 1.0') in text
    assert 'antre_api_enqueued_total{queue="default",result="created"} 1.0' in text


async def test_a_method_the_api_does_not_serve_is_counted_as_other(client: Any) -> None:
    """The method label comes from the client: one it may choose freely must not add series."""
    for method in ("PROPFIND", "MKCOL", "LOCK"):
        assert (await client.request(method, "/v1/queues/default/stats")).status == 405
    text = await (await client.get("/metrics")).text()
    assert ('antre_api_requests_total{method="other",route="/v1/queues/{queue}/stats",'
            'status="405"} 3.0') in text, "a known route, a method it does not serve"
    assert "PROPFIND" not in text
    assert (await client.request("DELETE", "/v1/queues/default/stats")).status == 405
    assert (await client.get("/v1/nowhere")).status == 404
    text = await (await client.get("/metrics")).text()
    assert ('antre_api_requests_total{method="DELETE",route="/v1/queues/{queue}/stats",'
            'status="405"} 1.0') in text
    assert 'antre_api_requests_total{method="GET",route="unmatched",status="404"} 1.0' in text


async def test_openapi_document_covers_every_route(client: Any) -> None:
    document = await (await client.get("/openapi.json")).json()
    assert document["openapi"].startswith("3.1")
    served = {(route.method.lower(), route.resource.canonical)
              for route in client.app.router.routes() if route.method != "HEAD"}
    documented = {(method, path.replace("{job_id}", "{job_id}"))
                  for path, item in document["paths"].items() for method in item}
    assert served == documented
