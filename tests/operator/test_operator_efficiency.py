"""Care on scale-down: busy pods are kept.

Before lowering replicas the operator sets pod-deletion-cost from the jobs in flight, so a
scale-down from 3 to 1 with one busy pod keeps the busy pod (the annotations are written before
the replicas are lowered). The cost of an idle JobQueue (no Kubernetes writes, one Redis round
trip per poll) is measured on a real API server: tests/e2e/test_operator_cluster_wide.py.
"""

from __future__ import annotations

import json
import time
from typing import Any

import antre
import redis
import redis.asyncio
from antre.protocol import scripts
from antre.protocol.claim import claim_op
from antre.protocol.extend_lease import extend_lease_op
from antre.settings import QueueSettings, WorkerSettings
from antre_operator import settings
from operator_emulation import create, eventually, jobqueue, method_of

NS = "default"


def replicas(k8s: Any, name: str) -> int | None:
    worker = k8s.live("deployments", NS, f"{name}-worker")
    return None if worker is None else int(worker["spec"]["replicas"])


async def register_worker(url: str, queue: str, *, worker_id: str, pod: str,
                          in_flight: int) -> None:
    """What a worker writes: its registry entry, and a claim of ``in_flight`` jobs."""
    client = redis.asyncio.Redis.from_url(url, decode_responses=True)
    try:
        entry = {"pod": pod, "host": pod, "pid": 1, "in_flight": in_flight, "concurrency": 4,
                 "started_at_ms": int(time.time() * 1000)}
        await scripts.run_async(client, extend_lease_op(
            QueueSettings(name=queue), [], lease_ms=60_000, worker_id=worker_id,
            registry_entry_json=json.dumps(entry), registry_ttl_ms=120_000))
        if in_flight:
            await scripts.run_async(client, claim_op(QueueSettings(name=queue), WorkerSettings(),
                                                     worker_id=worker_id, max_jobs=in_flight))
    finally:
        await client.aclose()


async def test_scale_down_keeps_the_busy_pod(k8s: Any, operator: Any, redis_url: str,
                                             redis_client: redis.Redis) -> None:
    await create(k8s, jobqueue("pods", NS, redis_url, autoscaling={
        "pollingIntervalSeconds": 1, "scaleDownStabilizationSeconds": 1, "cooldownSeconds": 60,
        "targetBacklogPerReplica": 100}))
    queue = antre.AsyncQueue.from_url(redis_url, "pods")
    try:
        await queue.enqueue_many([("noop", {})] * 300)
    finally:
        await queue.close()
    await eventually(lambda: replicas(k8s, "pods") == 3, message="3 replicas")

    # The pods a ReplicaSet would have made, and their workers' registry entries.
    labels = {settings.LABEL_JOBQUEUE: "pods", settings.LABEL_COMPONENT: "worker",
              settings.LABEL_MANAGED_BY: settings.MANAGED_BY}
    for suffix, in_flight in (("a", 0), ("b", 2), ("c", 0)):
        name = f"pods-worker-7d9-{suffix}"
        await create(k8s, {"apiVersion": "v1", "kind": "Pod",
                           "metadata": {"name": name, "namespace": NS, "labels": labels},
                           "spec": {"containers": [{"name": "worker", "image": "x"}]}})
        await register_worker(redis_url, "pods", worker_id=f"w-{suffix}", pod=name,
                              in_flight=in_flight)
    redis_client.delete(QueueSettings(name="pods").keys.ready)  # drained, pod b still busy

    await eventually(lambda: replicas(k8s, "pods") == 1, timeout_s=10, message="down to 1")
    costs = {suffix: (k8s.live("pods", NS, f"pods-worker-7d9-{suffix}")["metadata"]
                      .get("annotations") or {}).get(settings.POD_DELETION_COST)
             for suffix in "abc"}
    assert costs == {"a": "0", "b": "2", "c": "0"}, "the busy pod is the most expensive to delete"

    # Order: every pod annotation was written before the Deployment's replicas went down.
    patches = [(i, r) for i, r in enumerate(k8s.all_requests) if method_of(r) == "PATCH"]
    annotated = [i for i, r in patches if r.url.path.startswith(f"/api/v1/namespaces/{NS}/pods/")]
    lowered = [i for i, r in patches if r.url.path.endswith("/deployments/pods-worker")
               and isinstance(r.data, dict) and (r.data.get("spec") or {}).get("replicas") == 1]
    assert len(annotated) == 3 and lowered
    assert max(annotated) < lowered[0]
