"""The chart's operator.jobQueuePolicy and admission policies, as rendered.

Aspects: the allow-lists become the operator's flags, and the example JobQueue (which lives in
the release namespace) turns on --allow-operator-namespace; the operator learns its namespace
and ServiceAccount from the downward API. By default three ValidatingAdmissionPolicies (pods,
children, pod templates) with their bindings apply to the operator's ServiceAccount only; the
pod-template policy also holds the ServiceAccount allow-list when there is one; none without
rbac.create or operator.rbac.admissionPolicies, or on a cluster older than 1.30. What the API
server makes of them is tested in tests/e2e/test_multi_tenant_security.py.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from .helm_runner import FULLNAME, NAMESPACE, Rendering, render

Render = Callable[[dict[str, Any]], Rendering]
OPERATOR_USER = f"system:serviceaccount:{NAMESPACE}:{FULLNAME}"


def operator_container(rendering: Rendering) -> dict[str, Any]:
    deployment = rendering.one("Deployment", f"{FULLNAME}-operator")
    return dict(deployment["spec"]["template"]["spec"]["containers"][0])


def test_allow_lists_become_flags(rendered: Render) -> None:
    args = operator_container(rendered({"operator": {"jobQueuePolicy": {
        "imageRegistries": ["ghcr.io/acme", "docker.io/library/python"],
        "serviceAccounts": ["jobs"], "redisHosts": ["*.redis.svc.cluster.local"]}}}))["args"]
    assert [a for a in args if a.startswith("--allow")] == [
        "--allowed-image-registry=ghcr.io/acme",
        "--allowed-image-registry=docker.io/library/python",
        "--allowed-service-account=jobs",
        "--allowed-redis-host=*.redis.svc.cluster.local",
        "--allowed-api-service-type=ClusterIP"]


def test_only_cluster_ip_apis_by_default(rendered: Render) -> None:
    def flags(values: dict[str, Any]) -> list[str]:
        return [a for a in operator_container(rendered(values))["args"]
                if a.startswith("--allowed-api-service-type")]

    assert flags({}) == ["--allowed-api-service-type=ClusterIP"]
    assert flags({"operator": {"jobQueuePolicy": {"apiServiceTypes": []}}}) == []  # any
    # Values of a release from before the key (helm upgrade --reuse-values keeps them and
    # ignores the chart's new defaults; a null removes the key as that does).
    assert flags({"operator": {"jobQueuePolicy": {"apiServiceTypes": None}}}) == [
        "--allowed-api-service-type=ClusterIP"]


def test_the_operators_namespace_is_served_only_when_asked(rendered: Render) -> None:
    def flagged(values: dict[str, Any]) -> bool:
        return "--allow-operator-namespace" in operator_container(rendered(values))["args"]

    assert not flagged({})
    assert flagged({"operator": {"jobQueuePolicy": {"allowOperatorNamespace": True}}})
    assert flagged({"exampleJobQueue": {"enabled": True}, "redis": {"enabled": True}})


def test_the_operator_knows_its_namespace_and_account(rendered: Render) -> None:
    env = {e["name"]: e for e in operator_container(rendered({}))["env"]}
    assert env["POD_NAMESPACE"]["valueFrom"] == {"fieldRef": {"fieldPath": "metadata.namespace"}}
    assert env["ANTRE_OPERATOR_SERVICE_ACCOUNT"]["valueFrom"] == {
        "fieldRef": {"fieldPath": "spec.serviceAccountName"}}


def test_admission_policies_bind_the_operator_only(rendered: Render) -> None:
    rendering = rendered({})
    policies = rendering.of_kind("ValidatingAdmissionPolicy")
    assert sorted(p["metadata"]["name"] for p in policies) == [
        f"{FULLNAME}-operator-{n}" for n in ("children", "pod-templates", "pods")]
    for policy in policies:
        [condition] = policy["spec"]["matchConditions"]
        assert condition["expression"] == f'request.userInfo.username == "{OPERATOR_USER}"'
        assert policy["spec"]["failurePolicy"] == "Fail"
    bindings = rendering.of_kind("ValidatingAdmissionPolicyBinding")
    assert sorted(b["spec"]["policyName"] for b in bindings) == sorted(
        p["metadata"]["name"] for p in policies)
    assert all(b["spec"]["validationActions"] == ["Deny"] for b in bindings)


def test_the_account_allow_list_is_in_the_pod_template_policy(rendered: Render) -> None:
    def rules(values: dict[str, Any]) -> list[str]:
        policy = rendered(values).one("ValidatingAdmissionPolicy",
                                      f"{FULLNAME}-operator-pod-templates")
        return [v["expression"] for v in policy["spec"]["validations"]]

    unlisted = rules({})
    listed = rules({"operator": {"jobQueuePolicy": {"serviceAccounts": ["jobs", "etl"]}}})
    assert len(listed) == len(unlisted) + 1
    assert listed[1] == "variables.account == 'default' || variables.account in [\"jobs\",\"etl\"]"
    assert listed[:1] + listed[2:] == unlisted


def test_no_admission_policies_when_turned_off_or_too_old(rendered: Render, helm: str,
                                                          tmp_path: Any) -> None:
    for values in ({"operator": {"rbac": {"admissionPolicies": False}}},
                   {"operator": {"rbac": {"create": False}}}):
        assert not rendered(values).of_kind("ValidatingAdmissionPolicy")
    old = render(helm, {}, tmp_path, "--kube-version", "1.29.0")
    assert not old.of_kind("ValidatingAdmissionPolicy")
    assert old.of_kind("ClusterRole")
