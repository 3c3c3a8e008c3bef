"""``python -m antre_operator.uninstall`` (the chart's uninstall hook) on a real API server.

Aspects: a JobQueue with no finalizer is deleted at once (exit 0, one line saying so); one
already gone is success too; one whose finalizer stays is reported at the deadline; a refusal
(403) is one line naming the JobQueue, the namespace and the refusal, with no traceback, and
nothing is deleted. Both failures exit with the program's own code (EXIT_FAILED, not Python's 1
for a crash), the one the chart's Job fails at once on. The hook in a real ``helm uninstall`` is
in test_helm.py.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from antre_operator.uninstall import EXIT_FAILED
from redis_servers import child_env

from .cluster import Cluster
from .samples import jobqueue


def uninstall(kubeconfig: Path, namespace: str, name: str,
              timeout_s: float = 30) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in child_env().items() if not k.startswith("KUBERNETES_SERVICE")}
    env["KUBECONFIG"] = str(kubeconfig)
    return subprocess.run(
        [sys.executable, "-m", "antre_operator.uninstall", f"--namespace={namespace}",
         f"--name={name}", f"--timeout={timeout_s:g}"],
        capture_output=True, text=True, env=env, timeout=timeout_s + 30, check=False)


def make_jobqueue(cluster: Cluster, namespace: str, name: str,
                  finalizers: list[str] | None = None) -> None:
    queue = jobqueue(name, redis={"url": "redis://127.0.0.1:1/0"})
    if finalizers:
        queue["metadata"]["finalizers"] = finalizers
    cluster.apply(queue, namespace=namespace)


def test_deletes_and_then_finds_it_gone(cluster: Cluster, crds: None, namespace: str) -> None:
    make_jobqueue(cluster, namespace, "doomed")
    result = uninstall(cluster.kubeconfig, namespace, "doomed")
    assert (result.returncode, result.stdout, result.stderr) == (
        0, f"JobQueue {namespace}/doomed deleted\n", "")
    assert cluster.get("jobqueue", "doomed", namespace) is None
    again = uninstall(cluster.kubeconfig, namespace, "doomed")
    assert (again.returncode, again.stdout) == (0, f"JobQueue {namespace}/doomed was already gone\n")


def test_a_finalizer_nobody_removes_is_reported_at_the_deadline(cluster: Cluster, crds: None,
                                                               namespace: str) -> None:
    make_jobqueue(cluster, namespace, "held", finalizers=["example.com/keep"])
    try:
        result = uninstall(cluster.kubeconfig, namespace, "held", timeout_s=1)
        assert result.returncode == EXIT_FAILED
        assert result.stderr == (f"antre uninstall hook: JobQueue {namespace}/held was not "
                                 f"deleted within 1 s: still Terminating with finalizers "
                                 f"example.com/keep\n")
    finally:
        cluster.kubectl("patch", "jobqueue", "held", "-n", namespace, "--type=merge",
                        "-p", '{"metadata":{"finalizers":null}}', check=False)


def test_a_refusal_is_one_line_and_deletes_nothing(cluster: Cluster, crds: None,
                                                   namespace: str) -> None:
    make_jobqueue(cluster, namespace, "kept")
    cluster.kubectl("create", "serviceaccount", "nobody", "-n", namespace)
    result = uninstall(cluster.service_account_kubeconfig(namespace, "nobody"), namespace,
                       "kept")
    assert result.returncode == EXIT_FAILED
    (line,) = result.stderr.splitlines()
    assert line.startswith(f"antre uninstall hook: cannot read or delete JobQueue "
                           f"{namespace}/kept: HTTP 403: "), line
    assert "forbidden" in line, line
    assert "Traceback" not in result.stderr
    assert cluster.get("jobqueue", "kept", namespace) is not None
