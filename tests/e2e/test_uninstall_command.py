"""``python -m antre_operator.uninstall`` (the chart's uninstall hook) on a real API server.

Aspects: a JobQueue with no finalizer is deleted at once (exit 0, one line saying so); one
already gone is success too; one whose finalizer stays is reported at the deadline; a refusal
(403) is one line naming the JobQueue, the namespace and the refusal, with no traceback, and
nothing is deleted. Both failures exit with the program's own code (EXIT_FAILED, not Python's 1
for a crash), the one the chart's Job fails at once on. A JobQueue of the same name made by
someone else while the hook runs (another uid) is never deleted: not when it takes the name
between the hook's read and its delete (the delete's uid precondition), nor when it comes after
the delete; either way the hook fails with a line naming both uids. A delete carried out whose
answer was lost, sent again and answered "not found", is reported as deleted. The hook in a real
``helm uninstall`` is in test_helm.py.
"""

from __future__ import annotations

import asyncio
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import kubernetes
import pytest
from antre_operator import kube
from antre_operator.uninstall import EXIT_FAILED, UninstallFailed, delete_and_wait
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


class RacingClient(kube.KubeClient):
    """The program's real client, with another client's step run at one moment of the hook's:
    just before its delete reaches the API server, or just after it is answered."""

    def __init__(self, kubeconfig: Path, step: Callable[[], None], *, before: bool) -> None:
        configuration = kubernetes.client.Configuration()
        kubernetes.config.load_kube_config(  # type: ignore[no-untyped-call]
            config_file=str(kubeconfig), client_configuration=configuration)
        super().__init__(timeout_s=10, configuration=configuration)
        self.step, self.before = step, before

    async def delete(self, kind: str, namespace: str, name: str, *,
                     uid: str | None = None) -> bool:
        if self.before:
            await asyncio.to_thread(self.step)
        deleted = await super().delete(kind, namespace, name, uid=uid)
        if not self.before:
            await asyncio.to_thread(self.step)
        return deleted


def uid_of(cluster: Cluster, namespace: str, name: str) -> str:
    live = cluster.get("jobqueue", name, namespace)
    assert live is not None
    return str(live["metadata"]["uid"])


@pytest.mark.parametrize("before", [True, False], ids=["before-the-delete", "after-the-delete"])
async def test_a_jobqueue_made_in_its_place_is_left_alone(cluster: Cluster, crds: None,
                                                          namespace: str, before: bool) -> None:
    """Someone deletes the JobQueue the hook read and makes another of that name (a GitOps tool
    putting the example back, a user's own): before the hook's delete, whose uid precondition
    (a 409) then spares it; or after, while the hook waits for its own to go. The hook deletes
    neither that one nor anything else, and fails: helm would delete it by name next."""
    make_jobqueue(cluster, namespace, "example")
    read = uid_of(cluster, namespace, "example")

    def replace() -> None:
        cluster.kubectl("delete", "jobqueue", "example", "-n", namespace, "--ignore-not-found")
        make_jobqueue(cluster, namespace, "example")

    client = RacingClient(cluster.kubeconfig, replace, before=before)
    try:
        outcome: bool | str = await delete_and_wait(client, namespace, "example", timeout_s=10)
    except UninstallFailed as exc:
        outcome = str(exc)
    finally:
        await client.close()
    other = cluster.get("jobqueue", "example", namespace)
    assert other is not None, "the hook deleted the JobQueue made in its place"
    assert other["metadata"]["uid"] != read
    assert "deletionTimestamp" not in other["metadata"], "the hook deleted the JobQueue made in its place"
    assert outcome == (
        f"JobQueue {namespace}/example (uid {read}) is gone, but another of that name (uid "
        f"{other['metadata']['uid']}) was made meanwhile, which this hook leaves alone: delete "
        f"it yourself, or run helm uninstall again to delete it as the example")


class AnswerLostClient(kube.KubeClient):
    """The program's real client, whose first delete reaches the API server and is carried out,
    but whose answer is lost on the way back (a connection reset)."""

    def __init__(self, kubeconfig: Path) -> None:
        configuration = kubernetes.client.Configuration()
        kubernetes.config.load_kube_config(  # type: ignore[no-untyped-call]
            config_file=str(kubeconfig), client_configuration=configuration)
        super().__init__(timeout_s=10, configuration=configuration)
        self.deletes = 0

    async def delete(self, kind: str, namespace: str, name: str, *,
                     uid: str | None = None) -> bool:
        deleted = await super().delete(kind, namespace, name, uid=uid)
        self.deletes += 1
        if self.deletes == 1:
            raise kube.KubeError(0, "connection reset by peer")
        return deleted


async def test_a_delete_whose_answer_was_lost_is_reported_as_deleted(
        cluster: Cluster, crds: None, namespace: str) -> None:
    """The hook's delete is carried out but its answer lost; the one sent again finds nothing.
    The JobQueue was deleted by the hook, not gone before it: the line says so."""
    make_jobqueue(cluster, namespace, "example")
    client = AnswerLostClient(cluster.kubeconfig)
    try:
        deleted = await delete_and_wait(client, namespace, "example", timeout_s=10)
    finally:
        await client.close()
    assert client.deletes == 2
    assert deleted is True
    assert cluster.get("jobqueue", "example", namespace) is None
