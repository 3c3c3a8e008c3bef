"""Faults and bad input: the operator never scales on an error and isolates broken JobQueues.

Aspects: Redis stopped -> RedisReachable=False, a Warning Event, replicas kept, recovery when it
returns; maxmemory-policy other than noeviction -> RedisConfigured=False (a warning); a spec the
schema let through but the operator cannot use, a missing Secret, an unusable URL in a Secret ->
Ready=False with a clear reason and an Event, while a good JobQueue beside them keeps scaling.
"""

from __future__ import annotations

import base64
import re
import urllib.request
from typing import Any

import antre
import redis
from operator_emulation import condition, create, eventually, jobqueue
from redis_servers import running_redis

NS = "default"
FAST = {"pollingIntervalSeconds": 1, "scaleDownStabilizationSeconds": 60, "cooldownSeconds": 60,
        "targetBacklogPerReplica": 100, "maxReplicas": 10}


def replicas(k8s: Any, name: str) -> int | None:
    worker = k8s.live("deployments", NS, f"{name}-worker")
    return None if worker is None else int(worker["spec"]["replicas"])


def cond(k8s: Any, name: str, type_: str) -> dict[str, Any] | None:
    return condition(k8s.live("jobqueues", NS, name), type_)


def metric(operator: Any, name: str, **labels: str) -> float:
    with urllib.request.urlopen(f"http://127.0.0.1:{operator.settings.metrics_port}/metrics") as r:
        text = r.read().decode()
    for line in text.splitlines():
        if line.startswith(name + "{") and all(f'{k}="{v}"' in line for k, v in labels.items()):
            return float(line.rsplit(" ", 1)[1])
    return 0.0


async def enqueue(url: str, queue: str, count: int) -> None:
    client = antre.AsyncQueue.from_url(url, queue)
    try:
        await client.enqueue_many([("noop", {})] * count)
    finally:
        await client.close()


async def test_redis_down_keeps_replicas_and_recovers(k8s: Any, operator: Any) -> None:
    with running_redis("--maxmemory-policy", "noeviction") as server:
        await create(k8s, jobqueue("flaky", NS, server.url, autoscaling=FAST))
        await enqueue(server.url, "flaky", 300)
        await eventually(lambda: replicas(k8s, "flaky") == 3, message="3 replicas")

        server.kill()
        reachable = await eventually(
            lambda: (c := cond(k8s, "flaky", "RedisReachable")) and c["status"] == "False" and c,
            message="RedisReachable=False")
        assert reachable["reason"] == "ConnectionFailed"
        ready = cond(k8s, "flaky", "Ready")
        assert ready is not None and ready["status"] == "False"
        assert ready["reason"] == "RedisUnreachable"
        assert cond(k8s, "flaky", "Scaling")["reason"] == "Paused"  # type: ignore[index]
        await eventually(lambda: any(e.get("reason") == "RedisUnreachable"
                                     and e.get("type") == "Warning" for e in k8s.events(NS)),
                         message="a Warning Event")
        # Several failed polls later, the replicas are still what they were.
        errors = metric(operator, "antre_operator_reconcile_errors_total", jobqueue="flaky",
                        reason="RedisUnreachable")
        await eventually(lambda: metric(operator, "antre_operator_reconcile_errors_total",
                                        jobqueue="flaky", reason="RedisUnreachable") >= errors + 2,
                         timeout_s=10, message="two more failed polls")
        assert replicas(k8s, "flaky") == 3
        warnings = [e for e in k8s.events(NS) if e.get("reason") == "RedisUnreachable"]
        assert len(warnings) == 1, "one Event per outage, not one per poll"

        server.start()
        await eventually(lambda: (c := cond(k8s, "flaky", "RedisReachable")) and
                         c["status"] == "True", timeout_s=10, message="RedisReachable=True")
        # Redis is no longer the reason; kmock runs no pods, so no worker is available (Ready
        # with real workers: tests/e2e).
        await eventually(lambda: cond(k8s, "flaky", "Ready")["reason"]  # type: ignore[index]
                         == "WorkersUnavailable", message="Redis no longer the reason")


async def test_eviction_policy_is_a_warning(k8s: Any, operator: Any) -> None:
    with running_redis("--maxmemory-policy", "allkeys-lru") as server:
        await create(k8s, jobqueue("lossy", NS, server.url, autoscaling=FAST))
        configured = await eventually(
            lambda: (c := cond(k8s, "lossy", "RedisConfigured")) and c["status"] == "False" and c,
            message="RedisConfigured=False")
        assert configured["reason"] == "EvictionPolicy"
        assert "allkeys-lru" in configured["message"] and "noeviction" in configured["message"]
        await eventually(lambda: any(e.get("reason") == "RedisEvictionPolicy"
                                     and e.get("type") == "Warning" for e in k8s.events(NS)),
                         message="a Warning Event")
        ready = cond(k8s, "lossy", "Ready")
        assert ready is not None and ready["status"] == "True", "a warning, not an outage"


async def test_a_redis_without_info_still_scales(k8s: Any, operator: Any) -> None:
    """Managed Redis services rename or disable INFO (and ACLs often deny it: it is in
    @dangerous). The eviction check reads INFO; the worker and the dashboard shrug off its
    refusal, and so must the operator: the depth read succeeded, so Redis is reachable and the
    autoscaler scales. Only RedisConfigured stays unknown."""
    with running_redis("--maxmemory-policy", "noeviction",
                       "--rename-command", "INFO", "") as server:
        await create(k8s, jobqueue("managed", NS, server.url, autoscaling=FAST))
        await enqueue(server.url, "managed", 300)
        await eventually(lambda: replicas(k8s, "managed") == 3, message="3 replicas")
        await eventually(lambda: (c := cond(k8s, "managed", "RedisReachable"))
                         and c["status"] == "True", message="RedisReachable=True")
        configured = await eventually(
            lambda: (c := cond(k8s, "managed", "RedisConfigured")) and c["status"] == "Unknown"
            and c, message="RedisConfigured=Unknown")
        assert "INFO" in configured["message"], configured
        assert not any(e.get("reason") == "RedisUnreachable" for e in k8s.events(NS))


async def test_broken_jobqueues_do_not_affect_a_good_one(k8s: Any, operator: Any, redis_url: str,
                                                         redis_client: redis.Redis) -> None:
    # Objects the API server would have refused (the emulator has no schema): the operator must
    # still refuse them itself, and calmly.
    await create(k8s, jobqueue("inverted", NS, redis_url,
                               autoscaling={"minReplicas": 5, "maxReplicas": 2}))
    await create(k8s, jobqueue("leaky", NS, "redis://user:hunter2@redis:6380/0"))
    missing = jobqueue("nosecret", NS, redis_url)
    missing["spec"]["redis"] = {"urlSecretRef": {"name": "redis-url", "key": "url"}}
    await create(k8s, missing)
    garbled = jobqueue("garbled", NS, redis_url)
    garbled["spec"]["redis"] = {"urlSecretRef": {"name": "garbled", "key": "url"}}
    await create(k8s, {"apiVersion": "v1", "kind": "Secret",
                       "metadata": {"name": "garbled", "namespace": NS},
                       "data": {"url": base64.b64encode(b"redis://:pw@redis:notaport").decode()}})
    await create(k8s, garbled)
    await create(k8s, jobqueue("good", NS, redis_url, autoscaling=FAST))

    await enqueue(redis_url, "good", 200)
    await eventually(lambda: replicas(k8s, "good") == 2, message="the good one scales")

    inverted = await eventually(lambda: (c := cond(k8s, "inverted", "Ready")) and
                                c["status"] == "False" and c, message="inverted refused")
    assert inverted["reason"] == "InvalidSpec"
    assert inverted["message"] == ("spec.autoscaling.maxReplicas: got 2; must be an integer >= "
                                   "spec.autoscaling.minReplicas (5)")
    leaky = await eventually(lambda: cond(k8s, "leaky", "Ready"), message="leaky refused")
    assert leaky["reason"] == "InvalidSpec" and "hunter2" not in leaky["message"]
    assert k8s.live("deployments", NS, "inverted-worker") is None, "nothing rendered"

    secret = await eventually(lambda: (c := cond(k8s, "nosecret", "Ready")) and
                              c["reason"] == "SecretNotFound" and c, message="missing Secret")
    assert "Secret default/redis-url not found" in secret["message"]
    bad_url = await eventually(lambda: (c := cond(k8s, "garbled", "Ready")) and
                               c["reason"] == "InvalidRedisUrl" and c, message="bad URL")
    assert "pw" not in bad_url["message"] and "garbled" in bad_url["message"]
    await eventually(lambda: {"InvalidSpec", "SecretNotFound", "InvalidRedisUrl"} <=
                     {e.get("reason") for e in k8s.events(NS) if e.get("type") == "Warning"},
                     message="Warning Events for each")

    # Fix the missing Secret: that JobQueue recovers on its own.
    await create(k8s, {"apiVersion": "v1", "kind": "Secret",
                       "metadata": {"name": "redis-url", "namespace": NS},
                       "data": {"url": base64.b64encode(redis_url.encode()).decode()}})
    await eventually(lambda: cond(k8s, "nosecret", "Ready")["status"] == "True",  # type: ignore[index]
                     timeout_s=10, message="recovered after the Secret appeared")
    worker = k8s.live("deployments", NS, "nosecret-worker")
    env = {e["name"]: e for e in worker["spec"]["template"]["spec"]["containers"][0]["env"]}
    assert env["ANTRE_REDIS_URL"]["valueFrom"]["secretKeyRef"] == {"name": "redis-url",
                                                                   "key": "url"}
    assert not re.search("value.*redis://", str(env["ANTRE_REDIS_URL"]))
    assert replicas(k8s, "good") == 2
