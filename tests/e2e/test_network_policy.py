"""The chart's NetworkPolicies on a real API server, with the pods real controllers make.

No CNI runs here, so nothing enforces a NetworkPolicy: the API server stores it and that is all.
What can be checked is what a CNI would act on: which pods each policy and each of its peers
select. So the chart is installed with ``networkPolicy.enabled``, the Redis of the replicated
architecture and ``operator.watchNamespaces``. The ReplicaSet controller makes the operator
pod, the StatefulSet controller the first Redis pod.
The operator's own rendering of the example JobQueue (as the API server stored it, defaults
included) is applied in a watched and an unwatched namespace, where the controllers make the
worker, API and reaper pods (the reaper's through a Job made from its CronJob). Then the API
server answers, through its label and namespace selectors, which pods each policy protects and
which it admits:

* Redis admits the operator, the Redis pods, and the JobQueue pods of the watched namespace, on
  the Redis and Sentinel ports; not the JobQueue pods of the unwatched namespace, nor an
  unrelated pod; the listed extra client (networkPolicy.redis.extraIngress) too;
* the operator policy protects the operator pod only.

The same questions answered by tests/chart/selectors.py's reading of the selectors must agree,
which keeps the fast chart tests honest.
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import yaml
from antre_operator import rendering, spec
from chart.selectors import Pod, as_query, ingress_ports
from redis_servers import wait_until

from .cluster import Cluster
from .installs import helm_install
from .serving import SETTLE_S

RESTRICTED_CONTAINER = {
    "name": "main", "image": "registry.k8s.io/pause:3.10",
    "securityContext": {"allowPrivilegeEscalation": False, "runAsNonRoot": True,
                        "runAsUser": 65532, "capabilities": {"drop": ["ALL"]},
                        "seccompProfile": {"type": "RuntimeDefault"}}}


def plain_pod(name: str, labels: dict[str, str]) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "labels": labels},
            "spec": {"automountServiceAccountToken": False,
                     "containers": [RESTRICTED_CONTAINER]}}


def wait_for_default_account(cluster: Cluster, namespace: str) -> None:
    """Pods name the ``default`` ServiceAccount, which the controller manager adds."""
    cluster.wait_for("serviceaccount", "default", namespace, timeout_s=SETTLE_S)


def run_jobqueue_children(cluster: Cluster, jobqueue: dict[str, Any], namespace: str) -> None:
    """Apply the operator's rendering of ``jobqueue`` in ``namespace`` (without the owner
    reference, which the garbage collector would follow to a JobQueue that is not there)."""
    parsed = spec.parse_jobqueue(name=jobqueue["metadata"]["name"], namespace=namespace,
                                 spec=jobqueue["spec"])
    for child in rendering.render_children(parsed, "unused", replicas=1).present:
        manifest = copy.deepcopy(child)
        manifest["metadata"].pop("ownerReferences", None)
        cluster.apply(manifest, namespace=namespace)
    reaper = rendering.reaper_name(jobqueue["metadata"]["name"])
    cluster.kubectl("create", "job", f"{reaper}-now", f"--from=cronjob/{reaper}",
                    "-n", namespace)


def pods_of(cluster: Cluster, namespace: str) -> dict[str, Pod]:
    """Every pod of a namespace, keyed "namespace/component" (or its name without one)."""
    found = cluster.get("namespace", namespace)
    assert found is not None
    namespace_labels = found["metadata"]["labels"]
    pods = {}
    for item in cluster.items("pods", namespace):
        labels = item["metadata"].get("labels") or {}
        key = labels.get("app.kubernetes.io/component") or item["metadata"]["name"]
        pods[f"{namespace}/{key}"] = Pod(item["metadata"]["name"], namespace, labels,
                                         namespace_labels)
    return pods


def selected_by_api_server(cluster: Cluster, peer: dict[str, Any], policy_namespace: str,
                           ) -> set[tuple[str, str]]:
    """(namespace, pod name) of the pods one NetworkPolicyPeer covers, as the API server's
    selectors find them."""
    if "namespaceSelector" in peer:
        query = as_query(peer["namespaceSelector"])
        namespaces = [n["metadata"]["name"]
                      for n in cluster.items("namespaces", selector=query or None)]
    else:
        namespaces = [policy_namespace]
    query = as_query(peer.get("podSelector") or {})
    return {(namespace, pod["metadata"]["name"]) for namespace in namespaces
            for pod in cluster.items("pods", namespace, selector=query or None)}


def test_policies_select_the_pods_the_chart_and_operator_make(
        cluster: Cluster, crds: None, tmp_path: Path) -> None:
    release = "np"
    home, watched, unwatched, shop = namespaces = [
        cluster.create_namespace(n) for n in ("np-system", "np-a", "np-b", "shop")]
    values = {
        "networkPolicy": {"enabled": True, "redis": {"extraIngress": [{
            "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": shop}},
            "podSelector": {"matchLabels": {"app": "web"}}}]}},
        "operator": {"watchNamespaces": [watched]},
        "redis": {"enabled": True, "architecture": "replication",
                  "persistence": {"enabled": False}},
        "exampleJobQueue": {"enabled": True, "spec": {"api": {"enabled": True}}},
    }
    try:
        helm_install(cluster, release, home, values=values, workdir=tmp_path)
        example = cluster.get("jobqueue", "example", home)
        assert example is not None
        for namespace in namespaces:
            wait_for_default_account(cluster, namespace)
        for namespace in (watched, unwatched):
            run_jobqueue_children(cluster, example, namespace)
        for namespace in (home, shop):
            cluster.apply(plain_pod("web", {"app": "web"}), namespace=namespace)

        expected = {f"{home}/{c}" for c in ("operator", "redis", "web")} | {
            f"{n}/{c}" for n in (watched, unwatched) for c in ("worker", "api", "reaper")} | {
            f"{shop}/web"}
        pods: dict[str, Pod] = {}

        def all_pods_made() -> bool:
            pods.clear()
            for namespace in namespaces:
                pods.update(pods_of(cluster, namespace))
            missing = expected - set(pods)
            assert not missing, f"missing {sorted(missing)}"  # shown if the wait times out
            return True

        wait_until(all_pods_made, timeout_s=SETTLE_S, interval_s=0.5,
                   message="the controllers to make the pods")

        policies = {p["metadata"]["name"]: p for p in cluster.items("networkpolicies", home)}
        assert set(policies) == {"np-antre-redis", "np-antre-operator"}, sorted(policies)
        redis_policy = policies["np-antre-redis"]

        # Which pods each policy protects.
        for name, component in (("np-antre-redis", "redis"), ("np-antre-operator", "operator")):
            protected = selected_by_api_server(
                cluster, {"podSelector": policies[name]["spec"]["podSelector"]}, home)
            assert protected == {(home, pods[f"{home}/{component}"].name)}, (name, protected)

        # Which pods reach Redis, and on which ports: the API server's selectors...
        admitted: dict[tuple[str, str], set[int]] = {}
        for rule in redis_policy["spec"]["ingress"]:
            ports = {p["port"] for p in rule["ports"]}
            for peer in rule["from"]:
                for pod in selected_by_api_server(cluster, peer, home):
                    admitted.setdefault(pod, set()).update(ports)
        by_key = {key: admitted.get((pod.namespace, pod.name), set())
                  for key, pod in pods.items() if key in expected}
        both = {6379, 26379}
        assert by_key == {
            f"{home}/operator": both, f"{home}/redis": both, f"{home}/web": set(),
            **{f"{watched}/{c}": both for c in ("worker", "api", "reaper")},
            **{f"{unwatched}/{c}": set() for c in ("worker", "api", "reaper")},
            f"{shop}/web": both,
        }, yaml.safe_dump(by_key)
        # ... and the chart tests' reading of them agree.
        assert {key: ingress_ports(redis_policy, pods[key]) for key in by_key} == by_key
    finally:
        # No kubelet runs the example's uninstall hook, no operator finalizes the example.
        cluster.helm("uninstall", release, "--namespace", home, "--wait", "--no-hooks")
        for namespace in namespaces:
            cluster.delete_namespace(namespace)
