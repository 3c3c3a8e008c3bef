"""The operator as a process, and letting a JobQueue go, against the emulated API.

Aspects: the ``antre-operator`` console script runs the operator (and exits 0 on SIGTERM);
deleting a JobQueue releases kopf's finalizer and forgets its metrics. Children, ownership,
repairs and the API's children are tested on a real API server (tests/e2e).
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import urllib.request
from pathlib import Path
from typing import Any

from operator_emulation import create, delete, eventually, jobqueue, object_path

NS = "default"


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
