"""The operator against the emulated API: children appear, are owned, and are repaired.

Aspects: a JobQueue gets its worker Deployment and reaper CronJob (and API Deployment/Service
when enabled), each with an ownerReference to it; a child deleted or edited by hand is restored;
the API children go away when the API is disabled; status and printer-column fields are set.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import urllib.request
from pathlib import Path
from typing import Any

from operator_emulation import condition, create, delete, eventually, jobqueue, object_path, patch

NS = "default"


async def test_children_appear_owned(k8s: Any, operator: Any, redis_url: str) -> None:
    await create(k8s, jobqueue("mail", NS, redis_url))
    jq = await eventually(lambda: k8s.live("jobqueues", NS, "mail"), message="the JobQueue")
    worker = await eventually(lambda: k8s.live("deployments", NS, "mail-worker"),
                              message="the worker Deployment")
    reaper = await eventually(lambda: k8s.live("cronjobs", NS, "mail-reaper"),
                              message="the reaper CronJob")
    for child in (worker, reaper):
        [ref] = child["metadata"]["ownerReferences"]
        assert ref["uid"] == jq["metadata"]["uid"] and ref["kind"] == "JobQueue"
    ready = await eventually(
        lambda: (c := condition(k8s.live("jobqueues", NS, "mail"), "Ready")) and
        c["status"] == "True" and c, message="Ready=True")
    assert ready["reason"] == "Reconciled"
    # Both kopf and our client authenticate with the kubeconfig's token.
    agents = {(r.headers.get("User-Agent", "").split("/")[0], r.headers.get("Authorization"))
              for r in k8s.all_requests}
    assert ("antre-operator", "Bearer test-token") in agents
    assert ("kopf", "Bearer test-token") in agents
    assert all(auth == "Bearer test-token" for agent, auth in agents if agent != "kmock")


async def test_children_are_repaired(k8s: Any, operator: Any, redis_url: str) -> None:
    await create(k8s, jobqueue("fix", NS, redis_url, autoscaling={"pollingIntervalSeconds": 1}))
    worker = await eventually(lambda: k8s.live("deployments", NS, "fix-worker"),
                              message="the worker Deployment")
    image = worker["spec"]["template"]["spec"]["containers"][0]["image"]

    await delete(k8s, object_path("Deployment", NS, "fix-worker"))
    await eventually(lambda: k8s.live("deployments", NS, "fix-worker"), timeout_s=5,
                     message="the deleted Deployment re-created")
    await delete(k8s, object_path("CronJob", NS, "fix-reaper"))
    await eventually(lambda: k8s.live("cronjobs", NS, "fix-reaper"), timeout_s=5,
                     message="the deleted CronJob re-created")

    edited = {"spec": {"template": {"spec": {"containers": [{"name": "worker", "image": "evil"}]}}}}
    await patch(k8s, object_path("Deployment", NS, "fix-worker"), edited)
    await eventually(lambda: k8s.live("deployments", NS, "fix-worker")["spec"]["template"]["spec"]
                     ["containers"][0]["image"] == image, timeout_s=5, message="image restored")
    await patch(k8s, object_path("Deployment", NS, "fix-worker"),
                {"metadata": {"annotations": {"team": "mail"}}})  # foreign additions stay
    await eventually(lambda: any(e.get("reason") == "Repaired" for e in k8s.events(NS)),
                     message="a Repaired Event")
    live = k8s.live("deployments", NS, "fix-worker")
    assert live["metadata"]["annotations"] == {"team": "mail"}


async def test_api_children_follow_spec_api(k8s: Any, operator: Any, redis_url: str) -> None:
    api = {"enabled": True, "tokenSecretRef": {"name": "api-token"}, "port": 8080}
    await create(k8s, jobqueue("web", NS, redis_url, api=api,
                               autoscaling={"pollingIntervalSeconds": 1}))
    deployment = await eventually(lambda: k8s.live("deployments", NS, "web-api"),
                                  message="the API Deployment")
    service = await eventually(lambda: k8s.live("services", NS, "web-api"),
                               message="the API Service")
    assert service["spec"]["ports"][0]["port"] == 8080
    assert deployment["metadata"]["ownerReferences"][0]["name"] == "web"

    await patch(k8s, object_path("JobQueue", NS, "web"), {"spec": {"api": {"enabled": False}}})
    await eventually(lambda: k8s.live("deployments", NS, "web-api") is None and
                     k8s.live("services", NS, "web-api") is None, timeout_s=5,
                     message="the API children removed")


async def test_the_console_script_runs_the_operator(k8s: Any, kubeconfig: Path,
                                                    redis_url: str) -> None:
    """`antre-operator` as a process, as the Deployment runs it (not a thread)."""
    env = {**os.environ, "KUBECONFIG": str(kubeconfig), "PYTHONUNBUFFERED": "1"}
    env.pop("KUBERNETES_SERVICE_HOST", None)
    log = kubeconfig.parent / "operator.log"
    with log.open("wb") as out:
        process = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "antre_operator", "--all-namespaces", "--standalone",
            "--metrics-port=0", env=env, stdout=out, stderr=subprocess.STDOUT)
        try:
            await create(k8s, jobqueue("cli", NS, redis_url))
            await eventually(lambda: k8s.live("deployments", NS, "cli-worker"), timeout_s=20,
                             message=f"the worker Deployment (log: {log})")
        finally:
            process.terminate()
            code = await asyncio.wait_for(process.wait(), timeout=20)
    assert code == 0, log.read_text()[-3000:]


async def test_deleting_the_jobqueue_releases_it(k8s: Any, operator: Any, redis_url: str) -> None:
    """kopf's finalizer stops the loop first; the children go with their owner (ownerReferences:
    the emulator has no garbage collector, so only the owner's disappearance is asserted)."""
    await create(k8s, jobqueue("gone", NS, redis_url, autoscaling={"pollingIntervalSeconds": 1}))
    await eventually(lambda: "antre.dev/operator" in
                     (k8s.live("jobqueues", NS, "gone") or {}).get("metadata", {})
                     .get("finalizers", []), message="kopf's finalizer")
    await eventually(lambda: metric_lines(operator, 'jobqueue="gone"'), message="metrics")
    await delete(k8s, object_path("JobQueue", NS, "gone"))
    await eventually(lambda: k8s.live("jobqueues", NS, "gone") is None, timeout_s=15,
                     message="the JobQueue released and deleted")
    await eventually(lambda: not metric_lines(operator, 'jobqueue="gone"'),
                     message="its metrics forgotten")


def metric_lines(operator: Any, fragment: str) -> list[str]:
    port = operator.settings.metrics_port
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics") as response:
        return [line for line in response.read().decode().splitlines() if fragment in line]
