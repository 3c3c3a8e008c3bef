"""Every object of every variant is a valid Kubernetes object.

Aspects: built-in kinds against the Kubernetes OpenAPI schemas (kubernetes-validate, strict:
unknown fields are errors; the API server's own verdict on each variant, custom kinds
included, is in tests/e2e/test_helm.py); names are DNS labels;
every object carries the chart's labels and the release namespace where it is namespaced.
"""

from __future__ import annotations

import re
from pathlib import Path

import kubernetes_validate
import pytest
import yaml

from .helm_runner import CHART_DIR, NAMESPACE, Rendering, run_helm, values_args

# The oldest Kubernetes the chart supports is 1.27 (Chart.yaml kubeVersion); validating against a
# recent release catches removed APIs, and the objects used here are stable since 1.25.
KUBERNETES_VERSION = "1.31"
CUSTOM_GROUPS = {"antre.dev", "kopf.dev"}
CLUSTER_SCOPED = {"ClusterRole", "ClusterRoleBinding", "ClusterKopfPeering", "Namespace",
                  "ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding"}
DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")


def is_custom(obj: dict) -> bool:
    return obj["apiVersion"].rpartition("/")[0] in CUSTOM_GROUPS


def test_renders_objects(rendering: Rendering) -> None:
    assert rendering.of_kind("Deployment"), "the operator Deployment is always rendered"


def test_builtin_kinds_match_kubernetes_schemas(rendering: Rendering) -> None:
    failures = []
    for obj in rendering.manifests:
        if is_custom(obj):
            continue
        try:
            kubernetes_validate.validate(obj, KUBERNETES_VERSION, strict=True)
        except kubernetes_validate.ValidationError as e:
            path = ".".join(map(str, e.path))
            failures.append(f"{obj['kind']}/{obj['metadata']['name']}: {path}: {e.message}")
    assert not failures, "\n".join(failures)


def test_names_are_dns_labels(rendering: Rendering) -> None:
    for obj in rendering.manifests:
        assert DNS_LABEL.match(obj["metadata"]["name"]), obj["metadata"]["name"]


def test_namespaced_objects_have_a_namespace(rendering: Rendering) -> None:
    for obj in rendering.manifests:
        ns = obj["metadata"].get("namespace")
        if obj["kind"] in CLUSTER_SCOPED:
            assert ns is None, f"{obj['kind']} is cluster-scoped"
        elif obj["kind"] not in {"Role", "RoleBinding", "KopfPeering"}:
            # Roles and peerings go to the watched namespaces; all else stays in the release's.
            assert ns == NAMESPACE, f"{obj['kind']}/{obj['metadata']['name']} in {ns}"


def test_every_object_carries_the_chart_labels(rendering: Rendering) -> None:
    for obj in rendering.manifests:
        labels = obj["metadata"].get("labels", {})
        for key in ("app.kubernetes.io/name", "app.kubernetes.io/instance",
                    "app.kubernetes.io/component", "helm.sh/chart",
                    "app.kubernetes.io/managed-by"):
            assert key in labels, f"{obj['kind']}/{obj['metadata']['name']} lacks {key}"


@pytest.mark.parametrize("kind", ["Deployment", "StatefulSet"])
def test_selectors_match_pod_labels(rendering: Rendering, kind: str) -> None:
    for obj in rendering.of_kind(kind):
        selector = obj["spec"]["selector"]["matchLabels"]
        pod_labels = obj["spec"]["template"]["metadata"]["labels"]
        assert selector.items() <= pod_labels.items()
        assert "helm.sh/chart" not in selector, "selectors are immutable: no version in them"


def test_services_select_existing_pods(rendering: Rendering) -> None:
    pod_label_sets = [o["spec"]["template"]["metadata"]["labels"]
                      for o in rendering.manifests if o["kind"] in {"Deployment", "StatefulSet"}]
    for svc in rendering.of_kind("Service"):
        selector = svc["spec"]["selector"]
        assert any(selector.items() <= labels.items() for labels in pod_label_sets), (
            f"Service/{svc['metadata']['name']} selects no pod")


# Helm's longest release name (53 characters), with "antre" in it so that it is the full name.
LONGEST_RELEASE = "payments-production-eu-west-1-antre-queue-operator-ab"


@pytest.mark.parametrize("names", [
    pytest.param(["--set", "fullnameOverride=" + "a" * 63], id="longest-full-name"),
    pytest.param([], id="longest-release-name"),
])
def test_names_fit_with_the_longest_release_name(helm: str, tmp_path: Path,
                                                 names: list[str]) -> None:
    """Service names are DNS labels (at most 63 characters; the API server refuses longer
    ones), and two Services of the release never get the same name once cut."""
    values = {"redis": {"enabled": True},
              "exampleJobQueue": {"enabled": True, "spec": {"api": {"enabled": True}}},
              "networkPolicy": {"enabled": True},
              "operator": {"podDisruptionBudget": {"enabled": True}}}
    result = run_helm(helm, "template", LONGEST_RELEASE, str(CHART_DIR), "--namespace",
                      NAMESPACE, *values_args(values, tmp_path), *names)
    assert result.returncode == 0, result.stderr
    services = [d["metadata"]["name"] for d in yaml.safe_load_all(result.stdout)
                if d and d["kind"] == "Service"]
    assert len(services) == 2, services
    assert all(len(name) <= 63 for name in services), services
    assert len(set(services)) == len(services), services
