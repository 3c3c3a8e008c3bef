"""The autoscaler end to end: kopf + emulated API + a real Redis.

Aspects: 500 jobs raise the replicas within one polling interval (with a Scaled event); a
drained queue scales down only after the stabilization window and reaches zero only after the
cooldown; the metrics endpoint reports the numbers. spec.replicas driving the workers through
`kubectl scale` and /scale is tested on a real API server (tests/e2e).
"""

from __future__ import annotations

import time
import urllib.request
from typing import Any

import antre
import redis
from operator_emulation import condition, create, eventually, jobqueue

NS = "default"
FAST = {"pollingIntervalSeconds": 1, "scaleDownStabilizationSeconds": 3, "cooldownSeconds": 5,
        "targetBacklogPerReplica": 100, "maxReplicas": 10}


def replicas(k8s: Any, name: str) -> int | None:
    worker = k8s.live("deployments", NS, f"{name}-worker")
    return None if worker is None else int(worker["spec"]["replicas"])


async def test_scale_up_down_and_to_zero(k8s: Any, operator: Any, redis_url: str,
                                         redis_client: redis.Redis) -> None:
    await create(k8s, jobqueue("burst", NS, redis_url, autoscaling=FAST))
    await eventually(lambda: replicas(k8s, "burst") == 0, message="a pool at zero")

    queue = antre.AsyncQueue.from_url(redis_url, "burst")
    try:
        await queue.enqueue_many([("noop", {})] * 500)
    finally:
        await queue.close()
    enqueued_at = time.monotonic()
    await eventually(lambda: replicas(k8s, "burst") == 5, timeout_s=5, message="5 replicas")
    # Within one polling interval: the next poll sees the backlog and patches at once (plus a
    # second of slack for a loaded CI machine).
    assert time.monotonic() - enqueued_at <= FAST["pollingIntervalSeconds"] + 1.0

    jq = await eventually(lambda: (o := k8s.live("jobqueues", NS, "burst")) and
                          o["status"].get("backlog") == 500 and o, message="status backlog")
    assert jq["status"]["desiredReplicas"] == 5 and jq["status"]["replicas"] == 5
    assert jq["status"]["selector"] == "antre.dev/jobqueue=burst,app.kubernetes.io/component=worker"
    assert "lastScaleTime" in jq["status"]
    assert condition(jq, "Scaling")["status"] == "True"
    scaled = "Scaled workers 0 -> 5: backlog 500, target 100 per replica"
    await eventually(lambda: scaled in [e.get("message") for e in k8s.events(NS)],
                     message="the Scaled event")

    redis_client.flushall()  # drained: nothing ready, nothing processing
    drained_at = time.monotonic()
    # The last poll that saw the backlog was at most one interval before the drain; the windows
    # count from that poll.
    early = FAST["pollingIntervalSeconds"] + 0.2
    await eventually(lambda: replicas(k8s, "burst") == 1, timeout_s=10, message="down to 1")
    assert time.monotonic() - drained_at >= FAST["scaleDownStabilizationSeconds"] - early
    await eventually(lambda: replicas(k8s, "burst") == 0, timeout_s=10, message="down to 0")
    assert time.monotonic() - drained_at >= FAST["cooldownSeconds"] - early

    def metrics() -> str:
        url = f"http://127.0.0.1:{operator.settings.metrics_port}/metrics"
        with urllib.request.urlopen(url) as r:
            return str(r.read().decode())

    # The step that wrote the Deployment exports its figures after writing the other children
    # (the reaper CronJob rests once the pool is at zero): wait for them, not only the replicas.
    text = await eventually(lambda: (t := metrics()) and 'antre_operator_desired_replicas{'
                            'jobqueue="burst",namespace="default"} 0.0' in t and t,
                            timeout_s=5, message="the figures of the step at zero")
    assert 'antre_operator_backlog{jobqueue="burst",namespace="default"} 0.0' in text
    assert 'antre_operator_scale_events_total{direction="up",jobqueue="burst",namespace="default"}' in text
