"""``helm install``, ``upgrade`` and ``uninstall`` of charts/antre on a real API server.

Aspects covered:
* the install docs/helm.md gives (``--namespace antre-system --create-namespace``, defaults) is
  accepted: every object of the release exists; the operator pod that the real ReplicaSet
  controller creates passes the "restricted" Pod Security admission;
* the quick start (``redis.enabled``, ``exampleJobQueue.enabled``) is accepted too: the Redis
  StatefulSet, its Secret and the example JobQueue, stored with the CRD's defaults;
* with ``operator.watchNamespaces`` the rights are where the docs say: the operator's
  ServiceAccount may manage JobQueue children in the watched namespaces and nowhere else
  (asked of the API server's authoriser with ``kubectl auth can-i``); the namespaces must exist
  first, and the install says so when one does not;
* ``kubectl apply -f crds/`` then ``helm upgrade`` with other values is accepted and takes
  effect; ``helm uninstall`` removes every object of the release and keeps the CRDs;
* every value variant the chart tests render (tests/chart/helm_runner.py) is accepted by the
  API server as a whole (``kubectl apply --dry-run=server``: schemas, CEL rules, RBAC objects,
  the uninstall hook's objects);
* with the example JobQueue and a running operator, a plain ``helm uninstall`` leaves nothing:
  the pre-delete hook (its Job's pod run by the test kubelet, with a token of the hook's own
  ServiceAccount) deletes the example first and is deleted itself; without an operator to
  release the example, the hook fails with one line saying why and the release stays, in one
  pod and one hook timeout (the Job's podFailurePolicy).
"""

from __future__ import annotations

import contextlib
import copy
import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from antre_operator.settings import FINALIZER
from antre_operator.uninstall import EXIT_FAILED
from chart.helm_runner import VARIANTS
from redis_servers import RedisServer, wait_until

from .cluster import Cluster
from .installs import Install, helm_install, read_install, release_objects, values_file
from .kubelet import TestKubelet
from .operator_process import OperatorProcess
from .serving import SETTLE_S


def plural_of(kind: str) -> str:
    return {"ClusterRole": "clusterroles", "ClusterRoleBinding": "clusterrolebindings",
            "Role": "roles", "RoleBinding": "rolebindings", "ServiceAccount": "serviceaccounts",
            "Deployment": "deployments", "Service": "services",
            "ClusterKopfPeering": "clusterkopfpeerings.kopf.dev",
            "KopfPeering": "kopfpeerings.kopf.dev",
            "ValidatingAdmissionPolicy": "validatingadmissionpolicies",
            "ValidatingAdmissionPolicyBinding": "validatingadmissionpolicybindings"}[kind]


CLUSTER_SCOPED = ("Cluster", "ValidatingAdmissionPolicy")


def existing(cluster: Cluster, objects: list[dict[str, Any]], namespace: str,
             ) -> list[dict[str, Any] | None]:
    return [cluster.get(plural_of(obj["kind"]), obj["metadata"]["name"],
                        obj["metadata"].get("namespace") or (
                            None if obj["kind"].startswith(CLUSTER_SCOPED) else namespace))
            for obj in objects]


def can_i(cluster: Cluster, user: str, verb: str, resource: str, namespace: str) -> bool:
    """The API server's authoriser, asked through ``kubectl auth can-i`` (a SubjectAccessReview);
    ``resource`` may name a subresource after a slash, e.g. ``jobqueues.antre.dev/status``."""
    resource, _, subresource = resource.partition("/")
    args = ["auth", "can-i", verb, resource, "-n", namespace, f"--as={user}"]
    if subresource:
        args.append(f"--subresource={subresource}")
    return cluster.kubectl(*args, check=False).stdout.strip() == "yes"


def test_install_upgrade_uninstall_with_defaults(cluster: Cluster, crds: None,
                                                 tmp_path: Path) -> None:
    release, namespace = "antre", "antre-system"
    install = helm_install(cluster, release, namespace, workdir=tmp_path)
    try:
        objects = release_objects(cluster, release, namespace)
        kinds = sorted(obj["kind"] for obj in objects)
        assert kinds == ["ClusterRole", "ClusterRoleBinding", "Deployment", "Service",
                         "ServiceAccount", *["ValidatingAdmissionPolicy"] * 3,
                         *["ValidatingAdmissionPolicyBinding"] * 3], kinds
        assert all(existing(cluster, objects, namespace))

        # The real ReplicaSet controller makes the operator pod (Pending: no kubelet here);
        # the server says whether enforcing "restricted" would refuse it.
        wait_until(lambda: cluster.items("pods", namespace,
                                         "app.kubernetes.io/component=operator"),
                   timeout_s=30, message="the operator pod")
        result = cluster.kubectl("label", "--dry-run=server", "--overwrite", "namespace",
                                 namespace, "pod-security.kubernetes.io/enforce=restricted")
        assert "violate" not in result.stderr, result.stderr

        # Upgrade as docs/helm.md says: CRDs first, then the chart with new values.
        cluster.kubectl("apply", "-f", "crds/")
        cluster.helm("upgrade", release, "charts/antre", "--namespace", namespace,
                     *values_file(tmp_path, {"operator": {"replicaCount": 2,
                                                          "extraArgs": ["--verbose"]}}))
        upgraded = read_install(cluster, release, namespace)
        assert upgraded.deployment["spec"]["replicas"] == 2
        assert "--peering=antre" in upgraded.operator_args()
        assert "--verbose" in upgraded.operator_args()
        assert cluster.get("clusterkopfpeerings.kopf.dev", "antre") is not None
        objects = release_objects(cluster, release, namespace)
    finally:
        cluster.helm("uninstall", release, "--namespace", namespace, "--wait")
    assert not any(existing(cluster, objects, namespace)), "helm uninstall left objects"
    cluster.delete_namespace(namespace)
    assert cluster.get("crd", "jobqueues.antre.dev") is not None, "helm keeps the CRDs"
    assert install.service_account == "antre"


@pytest.fixture(scope="module")
def two_namespaces(cluster: Cluster) -> Iterator[list[str]]:
    names = [cluster.create_namespace("variant-a"), cluster.create_namespace("variant-b")]
    cluster.kubectl("apply", "-f", "charts/antre/crds/kopf.dev-peerings.yaml")
    yield names
    for name in names:
        cluster.delete_namespace(name)


@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_every_chart_variant_is_accepted_by_the_api_server(
        cluster: Cluster, crds: None, two_namespaces: list[str], variant: str,
        tmp_path: Path) -> None:
    values = copy.deepcopy(VARIANTS[variant])
    operator = values.get("operator") or {}
    if operator.get("watchNamespaces"):  # namespaces that exist here
        operator["watchNamespaces"] = two_namespaces[:len(operator["watchNamespaces"])]
    namespace = two_namespaces[0]
    rendered = cluster.helm("template", f"v-{variant}", "charts/antre", "--namespace",
                            namespace, *values_file(tmp_path, values)).stdout
    result = cluster.kubectl("apply", "--dry-run=server", "-f", "-",
                             input=rendered, check=False)
    assert result.returncode == 0, result.stderr
    objects = [doc for doc in yaml.safe_load_all(rendered) if doc]
    assert len(result.stdout.splitlines()) == len(objects), result.stdout


@pytest.fixture
def watched(cluster: Cluster) -> Iterator[list[str]]:
    names = [cluster.create_namespace("team-a"), cluster.create_namespace("team-b")]
    yield names
    for name in names:
        cluster.delete_namespace(name)


def test_quick_start_install(cluster: Cluster, crds: None, tmp_path: Path) -> None:
    release, namespace = "antre-try", "antre-try-system"
    helm_install(cluster, release, namespace, workdir=tmp_path,
                 values={"redis": {"enabled": True}, "exampleJobQueue": {"enabled": True}})
    try:
        objects = release_objects(cluster, release, namespace)
        kinds = {obj["kind"] for obj in objects}
        assert {"StatefulSet", "Secret", "JobQueue"} <= kinds, kinds
        for obj in objects:
            scope = None if obj["kind"].startswith(CLUSTER_SCOPED) else namespace
            kind = obj["kind"].lower() + ("" if obj["kind"] != "JobQueue" else ".antre.dev")
            assert cluster.get(kind, obj["metadata"]["name"], scope) is not None, obj["kind"]
        example = cluster.get("jobqueue", "example", namespace)
        assert example is not None
        assert example["spec"]["reaper"]["schedule"] == "* * * * *", "CRD defaults applied"
    finally:
        # No kubelet runs the example's uninstall hook here (test_plain_uninstall_... does),
        # and no operator put its finalizer on the example.
        cluster.helm("uninstall", release, "--namespace", namespace, "--wait", "--no-hooks")
        cluster.delete_namespace(namespace)


def test_watched_namespaces_must_exist(cluster: Cluster, crds: None, tmp_path: Path) -> None:
    result = cluster.helm("install", "antre-missing", "charts/antre", "-n",
                          "antre-missing-system", "--create-namespace",
                          "--set", "operator.watchNamespaces={team-missing}", check=False)
    try:
        assert result.returncode != 0
        assert 'namespaces "team-missing" not found' in result.stderr, result.stderr
    finally:
        cluster.helm("uninstall", "antre-missing", "-n", "antre-missing-system", check=False)
        cluster.delete_namespace("antre-missing-system")


def test_install_for_watched_namespaces(cluster: Cluster, crds: None, tmp_path: Path,
                                        watched: list[str]) -> None:
    release, namespace = "antre-teams", "antre-teams-system"
    unwatched = cluster.create_namespace("team-c")
    install = helm_install(cluster, release, namespace, workdir=tmp_path,
                           values={"operator": {"watchNamespaces": watched}})
    try:
        args = install.operator_args()
        assert [a for a in args if a.startswith("--namespace")] == [
            f"--namespace={name}" for name in watched]
        kinds = sorted(obj["kind"] for obj in release_objects(cluster, release, namespace))
        assert kinds.count("Role") == 2 and kinds.count("RoleBinding") == 2, kinds
        user = install.user
        for name in watched:
            for verb, resource in [("watch", "jobqueues.antre.dev"),
                                   ("patch", "jobqueues.antre.dev/status"),
                                   ("update", "jobqueues.antre.dev/finalizers"),
                                   ("create", "deployments.apps"), ("patch", "cronjobs.batch"),
                                   ("get", "secrets"), ("patch", "pods"), ("create", "events")]:
                assert can_i(cluster, user, verb, resource, name), (verb, resource, name)
            assert not can_i(cluster, user, "list", "secrets", name), "secrets by name only"
        for verb, resource in [("get", "secrets"), ("create", "deployments.apps"),
                               ("watch", "jobqueues.antre.dev")]:
            assert not can_i(cluster, user, verb, resource, unwatched), (verb, resource)
        assert can_i(cluster, user, "watch", "customresourcedefinitions", "default")
    finally:
        cluster.helm("uninstall", release, "--namespace", namespace, "--wait")
        cluster.delete_namespace(unwatched)


def test_install_with_the_longest_release_name(cluster: Cluster, crds: None,
                                                tmp_path: Path) -> None:
    """Helm allows release names of 53 characters; every name the chart derives from one (the
    full name plus "-operator-metrics", "-redis-headless", ...) must still be one the API
    server accepts, and the Redis StatefulSet's must still let its controller create the pod
    (a name past 52 characters got none)."""
    release = "payments-production-eu-west-1-antre-queue-operator-ab"
    assert len(release) == 53
    namespace = "antre-long-system"
    values = {"redis": {"enabled": True}, "exampleJobQueue": {"enabled": True}}
    try:
        install = helm_install(cluster, release, namespace, workdir=tmp_path, values=values)
        objects = release_objects(cluster, release, namespace)
        assert all(existing(cluster, [o for o in objects if o["kind"] in (
            "Deployment", "Service", "ServiceAccount")], namespace))
        assert install.service_account == release
        (statefulset,) = [o for o in objects if o["kind"] == "StatefulSet"]
        redis = statefulset["metadata"]["name"]
        cluster.wait_for("pod", f"{redis}-0", namespace, timeout_s=SETTLE_S,
                         what="the Redis pod the StatefulSet controller creates")
    finally:
        # No kubelet runs the example's uninstall hook, no operator finalizes the example.
        cluster.helm("uninstall", release, "--namespace", namespace, "--wait", "--no-hooks",
                     check=False)
        cluster.delete_namespace(namespace)



#: The pods of the example's pre-delete hook (the chart's Job), which the test kubelet runs.
HOOK_PODS = "app.kubernetes.io/component=example-uninstall"


@contextlib.contextmanager
def example_served(cluster: Cluster, release: str, namespace: str, workdir: Path,
                   **example: Any) -> Iterator[tuple[Install, TestKubelet | None]]:
    """The chart with its example JobQueue (more ``exampleJobQueue`` values in ``example``);
    the test kubelet runs the hook's pod in the release namespace. The operator is the test's
    to start (a local process: the chart's replicaCount is 0); at the end whatever a failed test
    left is cleaned up: the finalizer, the release (without hooks), the namespace."""
    server = RedisServer("--maxmemory-policy", "noeviction").start()
    values = {"operator": {"replicaCount": 0},
              "exampleJobQueue": {"enabled": True, "spec": {"redis": {"url": server.url}},
                                  **example}}
    kubelet: TestKubelet | None = None
    try:
        install = helm_install(cluster, release, namespace, workdir=workdir, values=values)
        # The hook's pod must pass the "restricted" Pod Security admission, as the chart's
        # other pods do.
        cluster.kubectl("label", "namespace", namespace,
                        "pod-security.kubernetes.io/enforce=restricted")
        if cluster.control_plane is not None:
            kubelet = TestKubelet(cluster.control_plane, workdir / "kubelet", [namespace],
                                  selector=HOOK_PODS).start()
        yield install, kubelet
        if kubelet is not None:
            assert not kubelet.errors(), kubelet.errors()
    finally:
        if kubelet is not None:
            kubelet.stop()
        if cluster.get("jobqueue", "example", namespace) is not None:
            cluster.kubectl("patch", "jobqueue", "example", "-n", namespace, "--type=merge",
                            "-p", '{"metadata":{"finalizers":null}}', check=False)
        cluster.helm("uninstall", release, "--namespace", namespace, "--no-hooks", check=False)
        cluster.delete_namespace(namespace)
        server.stop()


def hook_log(kubelet: TestKubelet | None, namespace: str) -> list[str]:
    """The output of every run of the hook's pod, line by line."""
    if kubelet is None:
        return []
    return [line for run in kubelet.runs(namespace, gone=True)
            for line in kubelet.log(namespace, run.name).splitlines()]


def test_plain_uninstall_leaves_nothing_behind(cluster: Cluster, crds: None,
                                               tmp_path: Path) -> None:
    """The example carries the operator's finalizer, which only the operator removes with the
    release's RBAC, and helm deletes custom resources last: a plain ``helm uninstall`` used to
    leave it Terminating for good. The chart's pre-delete hook deletes it first, while the
    operator runs; then nothing is left: the JobQueue, its workers, the release's objects, the
    hook's own Job, ServiceAccount, Role and RoleBinding."""
    release, namespace = "antre-bye", "antre-bye-system"
    hook = f"{release}-example-uninstall"
    with example_served(cluster, release, namespace, tmp_path) as (install, kubelet):
        operator = OperatorProcess(
            cluster.service_account_kubeconfig(install.namespace, install.service_account),
            tmp_path / "operator.log", install.operator_args(), extra_env=install.operator_env())
        try:
            operator.start()
            cluster.wait_for("jobqueue", "example", namespace, timeout_s=SETTLE_S,
                             what="the operator's finalizer on the example",
                             until=lambda jq: FINALIZER in jq["metadata"].get("finalizers", []))
            cluster.wait_for("deployment", "example-worker", namespace, timeout_s=SETTLE_S,
                             what="the example's workers", until=lambda deployment: True)
            objects = [obj for obj in release_objects(cluster, release, namespace)
                       if obj["kind"] != "JobQueue"]
            cluster.helm("uninstall", release, "--namespace", namespace, "--wait",
                         "--timeout=180s", timeout_s=240)
            # helm waited for the hook, and the hook for the example: it is gone already.
            assert cluster.get("jobqueue", "example", namespace) is None
            assert cluster.kubectl("get", "jobqueues", "-n", namespace, "-o", "name").stdout == ""
            cluster.wait_gone("deployment", "example-worker", namespace, timeout_s=SETTLE_S)
            for kind in ("job", "serviceaccount", "role", "rolebinding"):
                cluster.wait_gone(kind, hook, namespace, timeout_s=SETTLE_S)
            assert not any(existing(cluster, objects, namespace)), "helm uninstall left objects"
            assert cluster.helm("list", "-n", namespace, "-q").stdout.strip() == ""
            assert operator.forbidden() == []
        finally:
            operator.stop(timeout_s=15)
        if kubelet is not None:
            assert f"JobQueue {namespace}/example deleted" in hook_log(kubelet, namespace)
            assert [e.detail for e in kubelet.events_of(namespace, "exited")] == [
                "exit code 0"]


def test_uninstall_hook_reports_an_example_it_cannot_delete(cluster: Cluster, crds: None,
                                                           tmp_path: Path,
                                                           figures: list[str]) -> None:
    """No operator to remove the finalizer (stopped, or not watching the namespace): the hook
    gives up at its timeout with one line naming the example and why, ``helm uninstall`` fails
    and the release stays, for the user to start the operator and try again. One pod: the
    program's own failure fails the Job at once (its podFailurePolicy), where backoffLimit alone
    ran a second pod, which waited a second timeout for the same answer after the Job's back-off
    (18.5 s here before, for a 2 s timeout)."""
    if cluster.control_plane is None:
        pytest.skip("runs the hook's pod with the test kubelet")
    release, namespace = "antre-stuck", "antre-stuck-system"
    timeout_s = 2
    with example_served(cluster, release, namespace, tmp_path,
                        uninstallHook={"timeoutSeconds": timeout_s}) as (_, kubelet):
        assert kubelet is not None
        # The operator's finalizer, as it left it when it stopped.
        cluster.kubectl("patch", "jobqueue", "example", "-n", namespace, "--type=merge",
                        "-p", json.dumps({"metadata": {"finalizers": [FINALIZER]}}))
        started = time.monotonic()
        result = cluster.helm("uninstall", release, "--namespace", namespace, "--wait",
                              "--timeout=120s", check=False, timeout_s=180)
        took_s = time.monotonic() - started
        assert result.returncode != 0
        # helm names the hook's Job and its failure; the Job's pods say why (below).
        hook = f"{release}-example-uninstall"
        assert f"Job/{namespace}/{hook}" in result.stderr, result.stderr
        assert "Failed" in result.stderr, result.stderr
        assert cluster.helm("status", release, "-n", namespace, check=False).returncode == 0
        example = cluster.get("jobqueue", "example", namespace)
        assert example is not None and example["metadata"].get("deletionTimestamp")
        expected = (f"antre uninstall hook: JobQueue {namespace}/example was not deleted within "
                    f"{timeout_s} s: still Terminating with finalizers {FINALIZER}; is the antre "
                    f"operator running and watching this namespace?")
        # One pod, one line, no traceback.
        (pod,) = cluster.items("pods", namespace, HOOK_PODS)
        assert [run.name for run in kubelet.runs(namespace, gone=True)] == [
            pod["metadata"]["name"]]
        assert hook_log(kubelet, namespace) == [expected]
        assert [e.detail for e in kubelet.events_of(namespace, "exited")] == [
            f"exit code {EXIT_FAILED}"]
        # The failed Job stays for `kubectl logs` until the next try replaces it, saying the
        # policy failed it, not the backoff limit.
        job = cluster.get("job", hook, namespace)
        assert job is not None and job["status"].get("failed") == 1, job
        (failed,) = [c for c in job["status"]["conditions"]
                     if c["type"] == "Failed" and c["status"] == "True"]
        assert failed["reason"] == "PodFailurePolicy", failed
        # Two timeouts and the Job's 10 s back-off between the pods were the least it took.
        assert took_s < 2 * timeout_s + 10, took_s
        figures.append(f"helm uninstall with no operator to release the example (hook timeout "
                       f"{timeout_s} s): failed in {took_s:.1f} s, one hook pod")
