"""The operator on a real API server, reading a queue through ``redis+sentinel://``, keeps
working across two kill -9 failovers of the Redis primary in a row.

The chart is installed and its operator runs with the chart's ServiceAccount (``serving.py``);
the JobQueue's URL Secret names a local Sentinel group (three redis-servers, three Sentinels).
After each failover, jobs enqueued on the new primary show in ``kubectl get jq`` and raise the
worker Deployment's replicas, and the JobQueue's RedisReachable is True again: the operator
found the new primary by itself. No pod runs here (the backlog must stay as enqueued), so Ready
says no worker is available. ``spec.redis.durableReplicas`` reaches the worker pods as
ANTRE_DURABLE_REPLICAS. The API server refuses none of the operator's requests.
"""

from __future__ import annotations

import math
import time
from pathlib import Path
from typing import Any

import antre
from antre import connection
from redis_sentinels import sentinel_group
from redis_servers import wait_until

from .samples import jobqueue, redis_url_secret
from .serving import condition, serve

#: Jobs queued at each step: before any failover, after the first, after the second.
BACKLOGS = (250, 450, 650)
PER_REPLICA = 100


def test_operator_follows_two_failovers(cluster: Any, crds: None, tmp_path: Path,
                                        figures: list[str]) -> None:
    with sentinel_group() as group, serve(cluster, "namespaced", tmp_path, pods=None) as served:
        ns = served.namespace
        cluster.apply(redis_url_secret(group.url(), name="sentinel-url"), namespace=ns)
        cluster.apply(jobqueue(
            "emails",
            redis={"urlSecretRef": {"name": "sentinel-url", "key": "url"}, "durableReplicas": 1},
            worker={"handlers": "antre.example_handlers"},
            autoscaling={"enabled": True, "minReplicas": 1, "maxReplicas": 10,
                         "targetBacklogPerReplica": PER_REPLICA, "pollingIntervalSeconds": 1}),
            namespace=ns)
        served.wait_condition("emails", "RedisReachable")
        worker = served.wait_child("deployment", "emails-worker")
        env = {e["name"]: e.get("value") for e in worker["spec"]["template"]["spec"]["containers"][0]["env"]}
        assert env["ANTRE_DURABLE_REPLICAS"] == "1"

        # Both replicas confirm every enqueue: no job is lost with the primary it was sent to.
        producer = antre.Queue(connection.connect(group.url()), settings=antre.QueueSettings(
            name="emails", durable_replicas=2, durable_timeout_s=10))
        queued, killed_at, healed_at = 0, 0.0, 0.0
        try:
            for step, backlog in enumerate(BACKLOGS):
                if step:
                    killed_at = group.fail_over().killed_at
                    healed_at = time.monotonic()  # promoted, old primary back as a replica
                producer.enqueue_many([("send_email", {"n": n}) for n in range(queued, backlog)])
                queued = backlog

                def caught_up(backlog: int = backlog) -> bool:
                    jq = cluster.get("jobqueue", "emails", ns) or {}
                    deployment = served.child("deployment", "emails-worker") or {}
                    return ((jq.get("status") or {}).get("backlog") == backlog
                            and condition(jq, "RedisReachable") == "True"
                            and deployment.get("spec", {}).get("replicas")
                            == math.ceil(backlog / PER_REPLICA))

                wait_until(caught_up, timeout_s=60, interval_s=0.2,
                           message=f"the operator to show a backlog of {backlog} and scale for it")
                if step:
                    figures.append(
                        f"operator across failover {step}: the Sentinel group healed "
                        f"{healed_at - killed_at:.1f} s after the kill -9; jobs enqueued then "
                        f"were in the JobQueue's status and replicas "
                        f"{time.monotonic() - healed_at:.1f} s later")
        finally:
            producer.close()
        assert served.operator.forbidden() == []
