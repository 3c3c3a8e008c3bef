"""``helm install`` of the chart, and what a test needs to know about one install.

An :class:`Install` names the release, its namespace, the operator's ServiceAccount and the user
name the API server sees for it (``system:serviceaccount:NS:NAME``, as in the audit log), and
can give the operator's arguments exactly as the chart's Deployment has them.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import yaml

from .cluster import Cluster
from .operator_process import chart_args


@dataclasses.dataclass(frozen=True)
class Install:
    release: str
    namespace: str
    service_account: str
    deployment: dict[str, Any]
    """The operator Deployment as the API server stored it."""

    @property
    def user(self) -> str:
        return f"system:serviceaccount:{self.namespace}:{self.service_account}"

    def operator_args(self) -> list[str]:
        return chart_args(self.deployment)

    def operator_env(self) -> dict[str, str]:
        """The operator container's environment as the chart sets it, with the downward API
        resolved as the kubelet would (its namespace, its ServiceAccount)."""
        fields = {"metadata.namespace": self.namespace,
                  "spec.serviceAccountName": self.service_account,
                  "metadata.name": f"{self.release}-operator-local"}
        container = self.deployment["spec"]["template"]["spec"]["containers"][0]
        env: dict[str, str] = {}
        for item in container.get("env") or []:
            ref = (item.get("valueFrom") or {}).get("fieldRef")
            if ref is not None:
                env[item["name"]] = fields[ref["fieldPath"]]
            elif "value" in item:
                env[item["name"]] = str(item["value"])
        return env


def values_file(directory: Path, values: dict[str, Any]) -> list[str]:
    if not values:
        return []
    path = directory / "values.yaml"
    path.write_text(yaml.safe_dump(values))
    return ["--values", str(path)]


def helm_install(cluster: Cluster, release: str, namespace: str, *,
                 values: dict[str, Any] | None = None, workdir: Path) -> Install:
    """What the README says: ``helm install RELEASE charts/antre --namespace NS
    --create-namespace`` (plus ``--values``); no ``--wait``, since no pod ever runs here."""
    cluster.helm("install", release, "charts/antre", "--namespace", namespace,
                 "--create-namespace", *values_file(workdir, values or {}))
    return read_install(cluster, release, namespace)


def read_install(cluster: Cluster, release: str, namespace: str) -> Install:
    deployments = cluster.items("deployments", namespace,
                                selector=f"app.kubernetes.io/instance={release},"
                                         "app.kubernetes.io/component=operator")
    assert len(deployments) == 1, deployments
    deployment = deployments[0]
    account = deployment["spec"]["template"]["spec"]["serviceAccountName"]
    return Install(release=release, namespace=namespace, service_account=account,
                   deployment=deployment)


def release_objects(cluster: Cluster, release: str, namespace: str) -> list[dict[str, Any]]:
    """Every object of the release's manifest, as helm rendered it."""
    manifest = cluster.helm("get", "manifest", release, "--namespace", namespace).stdout
    return [doc for doc in yaml.safe_load_all(manifest) if doc]


def operator_rules(cluster: Cluster, install: Install) -> list[dict[str, Any]]:
    """The rules of the (Cluster)Roles the chart binds to the operator's ServiceAccount."""
    objects = release_objects(cluster, install.release, install.namespace)
    bound = {(b["roleRef"]["kind"], b["roleRef"]["name"]) for b in objects
             if b["kind"] in ("ClusterRoleBinding", "RoleBinding")
             and {"kind": "ServiceAccount", "name": install.service_account,
                  "namespace": install.namespace} in b.get("subjects", [])}
    return [rule for role in objects if (role["kind"], role["metadata"]["name"]) in bound
            for rule in role["rules"]]
