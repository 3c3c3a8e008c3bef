"""The operator Deployment: its command line per mode, probes, ports and the metrics Service.

Aspects: cluster-wide (--all-namespaces) versus namespaced (one --namespace per entry);
--standalone with one replica, --peering NAME with more; kopf's liveness endpoint on the probed
port; image tag defaulting to appVersion and digests winning; extraArgs and env appended.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from .helm_runner import FULLNAME, Rendering

Render = Callable[[dict[str, Any]], Rendering]


def operator_container(rendering: Rendering) -> dict[str, Any]:
    deployment = rendering.one("Deployment", f"{FULLNAME}-operator")
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    return container


@pytest.mark.parametrize(
    ("values", "expected", "absent"),
    [
        pytest.param({}, ["--all-namespaces", "--standalone"], ["--namespace", "--peering"],
                     id="defaults-cluster-wide-standalone"),
        pytest.param({"operator": {"watchNamespaces": ["a", "b"]}},
                     ["--namespace=a", "--namespace=b", "--standalone"], ["--all-namespaces"],
                     id="namespaced"),
        pytest.param({"operator": {"replicaCount": 2}},
                     ["--all-namespaces", "--peering=antre"], ["--standalone"],
                     id="two-replicas-peer"),
        pytest.param({"operator": {"replicaCount": 2, "peering": {"name": "blue"}}},
                     ["--peering=blue"], ["--standalone"], id="peering-name"),
        pytest.param({"operator": {"extraArgs": ["--verbose"]}}, ["--verbose"], [],
                     id="extra-args"),
    ],
)
def test_command_line(rendered: Render, values: dict, expected: list, absent: list) -> None:
    args = operator_container(rendered(values))["args"]
    for arg in expected:
        assert arg in args
    for prefix in absent:
        assert not any(a.startswith(prefix) for a in args), (prefix, args)


def test_runs_the_antre_operator_entrypoint(rendered: Render) -> None:
    """No command override: the image's ENTRYPOINT (antre-operator) runs with these args."""
    assert "command" not in operator_container(rendered({}))


def test_probes_hit_kopf_liveness_endpoint(rendered: Render) -> None:
    container = operator_container(rendered({"operator": {"health": {"port": 8181}}}))
    assert "--liveness=http://0.0.0.0:8181/healthz" in container["args"]
    ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    assert ports["health"] == 8181
    for probe in ("livenessProbe", "readinessProbe"):
        assert container[probe]["httpGet"] == {"path": "/healthz", "port": "health"}


def test_probes_can_be_disabled(rendered: Render) -> None:
    container = operator_container(rendered({"operator": {
        "livenessProbe": {"enabled": False}, "readinessProbe": {"enabled": False}}}))
    assert "livenessProbe" not in container
    assert "readinessProbe" not in container


def test_metrics_port_and_service(rendered: Render) -> None:
    rendering = rendered({"operator": {"metrics": {"port": 9999}}})
    container = operator_container(rendering)
    assert "--metrics-port=9999" in container["args"]
    service = rendering.one("Service", f"{FULLNAME}-operator-metrics")
    assert service["spec"]["ports"] == [
        {"name": "metrics", "port": 9999, "targetPort": "metrics", "protocol": "TCP"}]


def test_metrics_disabled(rendered: Render) -> None:
    rendering = rendered({"operator": {"metrics": {"enabled": False}}})
    # The operator serves metrics unless told --metrics-port=0.
    assert "--metrics-port=0" in operator_container(rendering)["args"]
    assert not rendering.of_kind("Service")


@pytest.mark.parametrize(
    ("image", "expected"),
    [
        pytest.param({}, "ghcr.io/antre-dev/antre-operator:0.1.0", id="appVersion"),
        pytest.param({"tag": "0.2.0"}, "ghcr.io/antre-dev/antre-operator:0.2.0", id="tag"),
        pytest.param({"digest": "sha256:" + "a" * 64},
                     "ghcr.io/antre-dev/antre-operator@sha256:" + "a" * 64, id="digest"),
    ],
)
def test_image(rendered: Render, image: dict, expected: str) -> None:
    assert operator_container(rendered({"operator": {"image": image}}))["image"] == expected


def test_replicas_and_pdb(rendered: Render) -> None:
    rendering = rendered({"operator": {"replicaCount": 3, "podDisruptionBudget": {"enabled": True}}})
    assert rendering.one("Deployment")["spec"]["replicas"] == 3
    assert rendering.one("PodDisruptionBudget")["spec"]["minAvailable"] == 1


def test_service_account(rendered: Render) -> None:
    default = rendered({})
    assert default.one("ServiceAccount")["metadata"]["name"] == FULLNAME
    pod = default.one("Deployment")["spec"]["template"]["spec"]
    assert pod["serviceAccountName"] == FULLNAME
    existing = rendered({"operator": {"serviceAccount": {"create": False, "name": "ops"}}})
    assert not existing.of_kind("ServiceAccount")
    assert existing.one("Deployment")["spec"]["template"]["spec"]["serviceAccountName"] == "ops"


def test_peering_object_per_mode(rendered: Render) -> None:
    assert not rendered({}).of_kind("ClusterKopfPeering")
    cluster = rendered({"operator": {"replicaCount": 2}})
    assert cluster.one("ClusterKopfPeering")["metadata"]["name"] == "antre"
    namespaced = rendered({"operator": {"replicaCount": 2, "watchNamespaces": ["a", "b"]}})
    assert not namespaced.of_kind("ClusterKopfPeering")
    assert sorted(p["metadata"]["namespace"] for p in namespaced.of_kind("KopfPeering")) == ["a", "b"]


def test_the_operator_accepts_the_rendered_command_line(rendering: Rendering) -> None:
    """Every variant's args parse with antre-operator's own argument parser."""
    from antre_operator import __main__ as operator_main
    deployment = rendering.one("Deployment", f"{FULLNAME}-operator")
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    args = operator_main.parse_args(container["args"])
    assert (args.peering is not None) == (deployment["spec"]["replicas"] > 1)
    assert args.liveness.endswith("/healthz")
