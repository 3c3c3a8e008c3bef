"""The optional NetworkPolicies (networkPolicy.enabled).

Aspects: off by default; the Redis policy selects the Redis pods and admits, on the Redis port
(and the Sentinel port with replication), exactly the operator, the JobQueue pods the operator
renders (workers, reaper, API) in the allowed namespaces, the Redis pods themselves when they
replicate, and the listed extra clients: not an unrelated pod, not a JobQueue pod of another
namespace, not the Redis pods in standalone mode; the operator policy selects the operator pod,
opens only its health and metrics ports, and lets it reach DNS, the API server and Redis
(the chart's own always, whatever redisTo says).

Selectors are matched against the labels of the rendered pod templates and of the operator's
own rendering of the example JobQueue (tests/chart/rendered_pods.py). The same questions go to
a real API server in tests/e2e/test_network_policy.py; none enforces a policy here (no CNI).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from .helm_runner import FULLNAME, NAMESPACE, Rendering
from .rendered_pods import chart_pods, jobqueue_pods
from .selectors import Pod, ingress_ports, selects

Render = Callable[[dict[str, Any]], Rendering]
EXAMPLE = {"enabled": True, "spec": {"api": {"enabled": True}}}


def values(architecture: str = "standalone", **network: Any) -> dict[str, Any]:
    return {"networkPolicy": {"enabled": True, **network},
            "redis": {"enabled": True, "architecture": architecture},
            "exampleJobQueue": EXAMPLE}


def test_off_by_default(rendered: Render) -> None:
    assert not rendered({"redis": {"enabled": True}, "exampleJobQueue": EXAMPLE}).of_kind(
        "NetworkPolicy")


def test_no_redis_policy_without_the_chart_redis(rendered: Render) -> None:
    policies = rendered({"networkPolicy": {"enabled": True}}).of_kind("NetworkPolicy")
    assert [p["metadata"]["name"] for p in policies] == [f"{FULLNAME}-operator"]


@pytest.mark.parametrize(("architecture", "ports"), [
    pytest.param("standalone", {6379}, id="standalone"),
    pytest.param("replication", {6379, 26379}, id="replication"),
])
def test_redis_admits_the_operator_and_jobqueue_pods_only(
        rendered: Render, architecture: str, ports: set[int]) -> None:
    chart = rendered(values(architecture))
    policy = chart.one("NetworkPolicy", f"{FULLNAME}-redis")
    pods = chart_pods(chart)
    assert selects(policy, pods["redis"])
    assert not selects(policy, pods["operator"])
    assert policy["spec"]["policyTypes"] == ["Ingress"]

    assert ingress_ports(policy, pods["operator"]) == ports
    for namespace in (NAMESPACE, "team-a"):
        for component, pod in jobqueue_pods(chart, namespace).items():
            assert ingress_ports(policy, pod) == ports, (namespace, component)
    # Between the Redis pods: replication and the Sentinels' gossip, only when they replicate.
    assert ingress_ports(policy, pods["redis"]) == (ports if architecture == "replication"
                                                    else set())

    web = Pod("web-0", NAMESPACE, {"app": "web"})
    assert ingress_ports(policy, web) == set()
    posing = Pod("posing-0", "team-a", {"app.kubernetes.io/name": "antre",
                                        "app.kubernetes.io/managed-by": "antre-operator"})
    assert ingress_ports(policy, posing) == set(), "a component the operator never renders"


def test_redis_admits_jobqueue_pods_of_the_watched_namespaces_only(rendered: Render) -> None:
    chart = rendered({**values(), "operator": {"watchNamespaces": ["team-a"]}})
    policy = chart.one("NetworkPolicy", f"{FULLNAME}-redis")
    assert all(ingress_ports(policy, pod) == {6379}
               for pod in jobqueue_pods(chart, "team-a").values())
    assert all(ingress_ports(policy, pod) == set()
               for pod in jobqueue_pods(chart, "team-b").values())
    assert ingress_ports(policy, chart_pods(chart)["operator"]) == {6379}


def test_redis_namespaces_can_be_narrowed_further(rendered: Render) -> None:
    chart = rendered(values(redis={"jobQueueNamespaces": ["team-b"]}))
    policy = chart.one("NetworkPolicy", f"{FULLNAME}-redis")
    assert all(ingress_ports(policy, pod) == {6379}
               for pod in jobqueue_pods(chart, "team-b").values())
    assert all(ingress_ports(policy, pod) == set()
               for pod in jobqueue_pods(chart, "team-a").values())


def test_extra_clients_reach_redis(rendered: Render) -> None:
    enqueuers = [{"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "shop"}},
                  "podSelector": {"matchLabels": {"app": "web"}}}]
    policy = rendered(values("replication", redis={"extraIngress": enqueuers})).one(
        "NetworkPolicy", f"{FULLNAME}-redis")
    assert ingress_ports(policy, Pod("web-0", "shop", {"app": "web"})) == {6379, 26379}
    assert ingress_ports(policy, Pod("web-0", NAMESPACE, {"app": "web"})) == set()
    assert ingress_ports(policy, Pod("cron-0", "shop", {"app": "cron"})) == set()


def egress_rule(policy: dict[str, Any], port: int) -> list[dict[str, Any]]:
    return [rule for rule in policy["spec"]["egress"]
            if port in {p["port"] for p in rule["ports"]}]


def test_operator_serves_health_and_metrics_only(rendered: Render) -> None:
    chart = rendered(values())
    policy = chart.one("NetworkPolicy", f"{FULLNAME}-operator")
    pods = chart_pods(chart)
    assert selects(policy, pods["operator"]) and not selects(policy, pods["redis"])
    assert policy["spec"]["policyTypes"] == ["Ingress", "Egress"]
    anyone_in_cluster = Pod("prometheus-0", "monitoring", {"app": "prometheus"})
    assert ingress_ports(policy, anyone_in_cluster) == {8080, 8000}
    operator = chart.one("Deployment")["spec"]["template"]["spec"]["containers"][0]
    assert {p["containerPort"] for p in operator["ports"]} == {8080, 8000}


def test_operator_metrics_from_listed_sources_only(rendered: Render) -> None:
    monitoring = [{"namespaceSelector": {"matchLabels": {
        "kubernetes.io/metadata.name": "monitoring"}}}]
    policy = rendered(values(operator={"metricsFrom": monitoring})).one(
        "NetworkPolicy", f"{FULLNAME}-operator")
    assert ingress_ports(policy, Pod("prometheus-0", "monitoring", {})) == {8080, 8000}
    assert ingress_ports(policy, Pod("web-0", "shop", {})) == {8080}


def test_operator_egress(rendered: Render) -> None:
    chart = rendered(values("replication"))
    policy = chart.one("NetworkPolicy", f"{FULLNAME}-operator")
    (dns,) = egress_rule(policy, 53)
    assert {(p["port"], p["protocol"]) for p in dns["ports"]} == {(53, "UDP"), (53, "TCP")}
    (api_server,) = egress_rule(policy, 6443)
    assert {p["port"] for p in api_server["ports"]} == {443, 6443}
    assert "to" not in api_server, "anywhere until networkPolicy.operator.apiServerTo says"
    assert len(egress_rule(policy, 26379)) == 2, "any Redis, and the chart's Redis pods"


def test_operator_egress_narrowed_keeps_the_chart_redis(rendered: Render) -> None:
    control_plane = [{"ipBlock": {"cidr": "10.0.0.10/32"}}]
    redis_hosts = [{"ipBlock": {"cidr": "10.1.0.0/16"}}]
    chart = rendered(values(operator={"apiServerTo": control_plane, "redisTo": redis_hosts,
                                      "apiServerPorts": [6443], "redisPorts": [6380]}))
    policy = chart.one("NetworkPolicy", f"{FULLNAME}-operator")
    (api_server,) = egress_rule(policy, 6443)
    assert api_server["to"] == control_plane and not egress_rule(policy, 443)
    (external,) = egress_rule(policy, 6380)
    assert external["to"] == redis_hosts
    (own,) = egress_rule(policy, 6379)
    (peer,) = own["to"]
    assert selects({"metadata": {"namespace": NAMESPACE}, "spec": peer},
                   chart_pods(chart)["redis"])
