"""Fixtures of the end-to-end tests: a real Kubernetes API, kubectl, helm, the operator process.

* ``cluster`` (session): the suite's own control plane (``control_plane.py``: etcd,
  kube-apiserver, kube-controller-manager built by scripts/fetch_kube.sh), or, with
  ``ANTRE_E2E_KUBECONFIG=/path/to/kubeconfig``, a cluster of your own (kind, k3d, a cloud one).
* ``crds`` (session): ``kubectl apply -f crds/`` done once.
* ``namespace``: a fresh namespace per test (restricted Pod Security enforced), deleted after;
  ``module_namespace`` one per module.
* ``start_operator``: runs the operator as a local process with a given kubeconfig; at the end
  of the test every process is stopped and a 403 in any of their logs fails the test.
* ``figures``: lines printed in the terminal summary (start time, request counts), so the
  figures a run measured are in CI's log (:mod:`run_report`).

Tests that need more (autoscaling, security) live beside these and reuse the same fixtures.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

import pytest

from .cluster import Cluster
from .control_plane import REPO_ROOT, ControlPlane, KubeBinaries
from .operator_process import OperatorProcess
from .samples import jobqueue

EXTERNAL_KUBECONFIG = "ANTRE_E2E_KUBECONFIG"


def _fetch(script: str, *args: str) -> str:
    result = subprocess.run(["bash", str(REPO_ROOT / "scripts" / script), *args],
                            stdout=subprocess.PIPE, text=True, check=False, timeout=3600)
    if result.returncode != 0:
        pytest.fail(f"scripts/{script} failed (exit {result.returncode}); run it to see why",
                    pytrace=False)
    return result.stdout


@pytest.fixture(scope="session")
def cluster(tmp_path_factory: pytest.TempPathFactory,
            figures: list[str]) -> Iterator[Cluster]:
    workdir = tmp_path_factory.mktemp("kube")
    helm = Path(_fetch("fetch_helm.sh").strip())
    external = os.environ.get(EXTERNAL_KUBECONFIG)
    if external:
        kubectl = Path(dict(line.split("=", 1) for line in
                            _fetch("fetch_kube.sh", "--kubectl-only").splitlines())["KUBECTL"])
        figures.append(f"cluster: {external} ({EXTERNAL_KUBECONFIG})")
        yield Cluster(kubeconfig=Path(external), kubectl=kubectl, helm=helm, workdir=workdir)
        return
    binaries = KubeBinaries.fetch()
    plane = ControlPlane(binaries, workdir / "control-plane", crds=[REPO_ROOT / "crds"])
    plane.start()
    try:
        figures.append(f"control plane (etcd, kube-apiserver, kube-controller-manager) "
                          f"ready in {plane.started_in_s:.1f} s")
        yield Cluster(kubeconfig=plane.admin_kubeconfig, kubectl=binaries.kubectl, helm=helm,
                      workdir=workdir, control_plane=plane)
    finally:
        plane.stop()


@pytest.fixture(scope="session")
def crds(cluster: Cluster) -> None:
    """``kubectl apply -f crds/`` (unchanged on the built control plane, which installs it
    before its controllers start), Established, and known to the garbage collector."""
    cluster.kubectl("apply", "-f", "crds/")
    # Not `kubectl wait`: it fails at once on a CRD whose status has no conditions yet.
    cluster.wait_for("crd", "jobqueues.antre.dev", None, what="the JobQueue CRD Established",
                     until=lambda crd: any(
                         c["type"] == "Established" and c["status"] == "True"
                         for c in (crd.get("status") or {}).get("conditions") or []))
    wait_for_garbage_collector(cluster)


def wait_for_garbage_collector(cluster: Cluster) -> None:
    """Delete a JobQueue that owns a ConfigMap and wait for the garbage collector to remove
    the ConfigMap: it then knows the resource (on a cluster whose CRD was just installed, that
    takes up to its 30 s discovery period plus a retry back-off)."""
    namespace = cluster.create_namespace("gc-probe")
    try:
        cluster.apply(jobqueue("probe", redis={"url": "redis://127.0.0.1:1/0"}),
                      namespace=namespace)
        owner = cluster.get("jobqueue", "probe", namespace)
        assert owner is not None
        cluster.apply({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {
            "name": "owned", "ownerReferences": [{
                "apiVersion": "antre.dev/v1alpha1", "kind": "JobQueue", "name": "probe",
                "uid": owner["metadata"]["uid"]}]}}, namespace=namespace)
        cluster.kubectl("delete", "jobqueue", "probe", "-n", namespace)
        cluster.wait_gone("configmap", "owned", namespace, timeout_s=120)
    finally:
        cluster.delete_namespace(namespace)


def _namespace_for(cluster: Cluster, request: pytest.FixtureRequest) -> Iterator[str]:
    prefix = "".join(c if c.isalnum() else "-" for c in request.node.name.lower())[:40]
    name = cluster.create_namespace(prefix.strip("-") or "e2e")
    yield name
    cluster.delete_namespace(name)


@pytest.fixture
def namespace(cluster: Cluster, request: pytest.FixtureRequest) -> Iterator[str]:
    """A namespace of this test's own."""
    yield from _namespace_for(cluster, request)


@pytest.fixture(scope="module")
def module_namespace(cluster: Cluster, request: pytest.FixtureRequest) -> Iterator[str]:
    """A namespace shared by the tests of one module (for dry runs that store nothing)."""
    yield from _namespace_for(cluster, request)


StartOperator = Callable[..., OperatorProcess]


@pytest.fixture
def start_operator(tmp_path: Path) -> Iterator[StartOperator]:
    """start_operator(kubeconfig, args, polling_s=1.0): a running operator process."""
    started: list[OperatorProcess] = []

    def start(kubeconfig: Path, args: Sequence[str], **kwargs: object) -> OperatorProcess:
        log = tmp_path / f"operator-{len(started)}.log"
        process = OperatorProcess(kubeconfig, log, args, **kwargs)  # type: ignore[arg-type]
        started.append(process)
        return process.start()  # type: ignore[return-value]

    yield start
    forbidden = []
    for process in started:
        process.stop(timeout_s=15)
        forbidden += process.forbidden()
    assert not forbidden, "the API server refused the operator:\n" + "\n".join(forbidden)
