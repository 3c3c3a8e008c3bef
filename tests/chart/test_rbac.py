"""The chart's RBAC: least privilege, per mode.

Aspects: cluster-wide mode renders one ClusterRole + binding and no Role; namespaced mode renders
a Role + RoleBinding per watched namespace and a ClusterRole limited to read-only observation of
CRDs and namespaces; peering rules only with more than one replica; no wildcards anywhere;
Secrets are only read by name; every rule is one the operator's code paths need. The example's
uninstall hook may only get and delete the example itself, by name, in the release namespace.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from .helm_runner import FULLNAME, NAMESPACE, Rendering

Render = Callable[[dict[str, Any]], Rendering]
Grants = set[tuple[str, str, str]]


def grants(role: dict[str, Any]) -> Grants:
    """(apiGroup, resource, verb) triples of a Role or ClusterRole."""
    return {(g, r, v) for rule in role["rules"] for g in rule["apiGroups"]
            for r in rule["resources"] for v in rule["verbs"]}


# What the operator does in a watched namespace (see templates/_rbac.tpl for the why of each).
NAMESPACED: Grants = (
    # No get: kopf lists, watches and patches, and nothing reads one JobQueue (a review found
    # get granted but never sent, in the API server's audit log).
    {("antre.dev", "jobqueues", v) for v in ("list", "watch", "patch")}
    | {("antre.dev", "jobqueues/status", "patch")}
    | {("antre.dev", "jobqueues/finalizers", "update")}  # blockOwnerDeletion on children
    | {(g, r, v) for g, r in (("apps", "deployments"), ("", "services"), ("batch", "cronjobs"))
       for v in ("get", "list", "watch", "create", "patch", "delete")}
    | {("", "pods", v) for v in ("list", "patch")}
    | {("", "secrets", "get")}
    | {("", "events", "create")}
)
CRD_OBSERVATION: Grants = {("apiextensions.k8s.io", "customresourcedefinitions", v)
                           for v in ("list", "watch")}
NAMESPACE_OBSERVATION: Grants = {("", "namespaces", v) for v in ("list", "watch")}
CLUSTER_PEERING: Grants = {("kopf.dev", "clusterkopfpeerings", v)
                           for v in ("list", "watch", "patch")}
NAMESPACED_PEERING: Grants = {("kopf.dev", "kopfpeerings", v)
                              for v in ("list", "watch", "patch")}


def test_cluster_wide_grants_exactly_what_the_operator_uses(rendered: Render) -> None:
    rendering = rendered({})
    assert not rendering.of_kind("Role")
    role = rendering.one("ClusterRole", f"{FULLNAME}-operator")
    assert grants(role) == NAMESPACED | CRD_OBSERVATION


def test_cluster_wide_binding_targets_the_service_account(rendered: Render) -> None:
    binding = rendered({}).one("ClusterRoleBinding")
    assert binding["roleRef"]["name"] == f"{FULLNAME}-operator"
    assert binding["subjects"] == [
        {"kind": "ServiceAccount", "name": FULLNAME, "namespace": NAMESPACE}]


def test_namespaced_mode_uses_one_role_per_namespace(rendered: Render) -> None:
    rendering = rendered({"operator": {"watchNamespaces": ["team-a", "team-b"]}})
    roles = rendering.of_kind("Role")
    assert sorted(r["metadata"]["namespace"] for r in roles) == ["team-a", "team-b"]
    for role in roles:
        assert grants(role) == NAMESPACED
    bindings = rendering.of_kind("RoleBinding")
    assert sorted(b["metadata"]["namespace"] for b in bindings) == ["team-a", "team-b"]
    for binding in bindings:
        assert binding["subjects"][0]["namespace"] == NAMESPACE


def test_namespaced_mode_cluster_role_is_read_only_observation(rendered: Render) -> None:
    rendering = rendered({"operator": {"watchNamespaces": ["team-a"]}})
    (cluster_role,) = rendering.of_kind("ClusterRole")
    assert grants(cluster_role) == CRD_OBSERVATION | NAMESPACE_OBSERVATION
    assert rendering.one("ClusterRoleBinding")["roleRef"]["name"] == cluster_role["metadata"]["name"]


@pytest.mark.parametrize(
    ("values", "kind", "peering"),
    [
        pytest.param({"operator": {"replicaCount": 2}}, "ClusterRole", CLUSTER_PEERING,
                     id="cluster-wide"),
        pytest.param({"operator": {"replicaCount": 2, "watchNamespaces": ["a"]}}, "Role",
                     NAMESPACED_PEERING, id="namespaced"),
    ],
)
def test_peering_rules_only_with_replicas(
    rendered: Render, values: dict, kind: str, peering: Grants
) -> None:
    with_peers = rendered(values).of_kind(kind)[0]
    assert peering <= grants(with_peers)
    alone = dict(values, operator=dict(values["operator"], replicaCount=1))
    assert not peering & grants(rendered(alone).of_kind(kind)[0])


def test_no_wildcards_and_secrets_read_by_name_only(rendered: Render) -> None:
    rendering = rendered({"operator": {"replicaCount": 2}})
    for role in rendering.of_kind("ClusterRole") + rendering.of_kind("Role"):
        for group, resource, verb in grants(role):
            assert "*" not in (group, resource, verb), role["metadata"]["name"]
            if resource == "secrets":
                assert verb == "get", "list/watch on secrets would read every password"


HOOK = f"{FULLNAME}-example-uninstall"


@pytest.mark.parametrize("values", [
    pytest.param({}, id="cluster-wide"),
    pytest.param({"operator": {"watchNamespaces": ["team-a"]}}, id="namespaced"),
])
def test_uninstall_hook_may_only_get_and_delete_the_example(rendered: Render,
                                                           values: dict[str, Any]) -> None:
    """antre_operator.uninstall deletes the example, then reads it until it is gone: nothing
    else, and no other JobQueue (list and watch cannot be limited to one name)."""
    rendering = rendered({**values, "redis": {"enabled": True},
                          "exampleJobQueue": {"enabled": True, "name": "demo"}})
    role = rendering.one("Role", HOOK)
    assert role["metadata"]["namespace"] == NAMESPACE
    assert role["rules"] == [{"apiGroups": ["antre.dev"], "resources": ["jobqueues"],
                              "resourceNames": ["demo"], "verbs": ["get", "delete"]}]
    binding = rendering.one("RoleBinding", HOOK)
    assert binding["roleRef"] == {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role",
                                  "name": HOOK}
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": HOOK,
                                    "namespace": NAMESPACE}]
    job = rendering.one("Job", HOOK)
    assert job["spec"]["template"]["spec"]["serviceAccountName"] == HOOK
    # The hook's account is its own: the operator's rights are not lent to it.
    assert rendering.one("ServiceAccount", HOOK)["automountServiceAccountToken"] is False
    assert HOOK not in {s["name"] for b in rendering.of_kind("ClusterRoleBinding")
                        for s in b["subjects"]}


def test_rbac_can_be_left_to_the_cluster_admin(rendered: Render) -> None:
    rendering = rendered({"operator": {"rbac": {"create": False}}})
    for kind in ("ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding"):
        assert not rendering.of_kind(kind)
