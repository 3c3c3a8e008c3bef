"""The uninstall hook's Job, as the chart renders it, under the real Job controller.

Aspects: how the Job treats each way its pod can fail (``podFailurePolicy`` and
``backoffLimit``): a pod lost to its node (the DisruptionTarget condition an eviction, a drain
or a preemption sets) is replaced without spending the one retry; a crash (exit 1, Python's
exit for an uncaught exception) spends it and a second pod runs; the program's own verdict (exit
3, EXIT_FAILED) fails the Job at once, with the Job saying which rule and exit code did it.

No kubelet runs these pods: the test writes each pod's status as a kubelet reports a container
that exited (phase Failed, the container's exit code, and the DisruptionTarget condition for a
disrupted pod), and the Job controller of the suite's control plane does the rest. The hook's
pod run for real, by the test kubelet in a real ``helm uninstall``, is in test_helm.py.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest
import yaml
from antre_operator import uninstall
from redis_servers import wait_until

from .cluster import Cluster
from .installs import values_file

RELEASE = "rel"
HOOK = f"{RELEASE}-antre-example-uninstall"
TEMPLATE = "templates/example-jobqueue-uninstall-hook.yaml"
#: The Job controller's delay before the pod after a counted failure (10 s, doubling).
JOB_BACKOFF_S = 10.0


def hook_objects(cluster: Cluster, namespace: str, workdir: Path) -> list[dict[str, Any]]:
    values = {"redis": {"enabled": True}, "exampleJobQueue": {"enabled": True}}
    rendered = cluster.helm("template", RELEASE, "charts/antre", "--namespace", namespace,
                            "--show-only", TEMPLATE, *values_file(workdir, values)).stdout
    return [doc for doc in yaml.safe_load_all(rendered) if doc]


def hook_pods(cluster: Cluster, namespace: str) -> list[dict[str, Any]]:
    pods = cluster.items("pods", namespace, selector=f"batch.kubernetes.io/job-name={HOOK}")
    return sorted(pods, key=lambda pod: pod["metadata"]["creationTimestamp"])


def wait_for_pods(cluster: Cluster, namespace: str, count: int, timeout_s: float) -> dict[str, Any]:
    """The newest of ``count`` hook pods, once the Job controller has made that many."""
    wait_until(lambda: len(hook_pods(cluster, namespace)) >= count, timeout_s=timeout_s,
               interval_s=0.2, message=f"hook pod #{count}")
    pods = hook_pods(cluster, namespace)
    assert len(pods) == count, [p["metadata"]["name"] for p in pods]
    return pods[-1]


def fail(cluster: Cluster, pod: dict[str, Any], exit_code: int, *,
         disrupted: bool = False) -> None:
    """Report the pod's container exited with ``exit_code`` and the pod Failed, as a kubelet
    does; ``disrupted``: with the condition the eviction API, a drain or a preemption sets."""
    now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    (container,) = pod["spec"]["containers"]
    conditions = [{"type": "DisruptionTarget", "status": "True",
                   "reason": "EvictionByEvictionAPI", "message": "Eviction API: evicting",
                   "lastTransitionTime": now}] if disrupted else []
    status = {"phase": "Failed", "conditions": conditions, "containerStatuses": [{
        "name": container["name"], "image": container["image"], "imageID": "",
        "ready": False, "restartCount": 0, "started": False,
        "state": {"terminated": {"exitCode": exit_code, "reason": "Error",
                                 "startedAt": now, "finishedAt": now}}}]}
    cluster.kubectl("patch", "pod", pod["metadata"]["name"], "-n", pod["metadata"]["namespace"],
                    "--subresource=status", "--type=merge", "-p", json.dumps({"status": status}))


def job_failed(job: dict[str, Any]) -> dict[str, Any] | None:
    return next((c for c in (job.get("status") or {}).get("conditions") or []
                 if c["type"] == "Failed" and c["status"] == "True"), None)


def test_a_disruption_is_free_a_crash_is_retried_once_a_verdict_fails_the_job(
        cluster: Cluster, namespace: str, tmp_path: Path) -> None:
    if cluster.control_plane is None:
        pytest.skip("writes pod statuses a real cluster's kubelets would overwrite")
    cluster.apply(hook_objects(cluster, namespace, tmp_path), namespace=namespace)

    # Lost to its node: replaced at once, and the Job counts no failure.
    fail(cluster, wait_for_pods(cluster, namespace, 1, timeout_s=30), 143, disrupted=True)
    second = wait_for_pods(cluster, namespace, 2, timeout_s=JOB_BACKOFF_S)
    job = cluster.get("job", HOOK, namespace)
    assert job is not None and not (job.get("status") or {}).get("failed"), job
    assert job_failed(job) is None

    # A crash: counted, and the one retry (backoffLimit 1) runs after the Job's back-off.
    fail(cluster, second, 1)
    third = wait_for_pods(cluster, namespace, 3, timeout_s=JOB_BACKOFF_S + 30)
    job = cluster.get("job", HOOK, namespace)
    assert job is not None and job["status"].get("failed") == 1, job["status"]
    assert job_failed(job) is None

    # The program's verdict: the Job fails at once, by the policy's rule, with no pod after.
    fail(cluster, third, uninstall.EXIT_FAILED)
    job = cluster.wait_for("job", HOOK, namespace, timeout_s=30, what="the hook Job Failed",
                           until=job_failed)
    failed = job_failed(job)
    assert failed is not None and failed["reason"] == "PodFailurePolicy", failed
    assert f"exit code {uninstall.EXIT_FAILED}" in failed["message"], failed
    assert len(hook_pods(cluster, namespace)) == 3
