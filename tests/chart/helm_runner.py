"""Running helm for the chart tests: locating the binary, rendering, and the value variants.

helm is looked up in this order: env HELM, `helm` on PATH, then the cache that
scripts/fetch_helm.sh fills ($ANTRE_HELM_CACHE/bin/helm, default .cache/helm/bin/helm).
"""

from __future__ import annotations

import os
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

REPO_ROOT = Path(__file__).resolve().parents[2]
CHART_DIR = REPO_ROOT / "charts" / "antre"
CACHED_HELM = Path(os.environ.get("ANTRE_HELM_CACHE") or REPO_ROOT / ".cache" / "helm") / "bin" / "helm"
RELEASE = "rel"
NAMESPACE = "antre-system"
FULLNAME = f"{RELEASE}-antre"

Manifest = dict[str, Any]


def find_helm() -> str | None:
    from_env = os.environ.get("HELM")
    if from_env:
        return from_env if os.access(from_env, os.X_OK) else None
    on_path = shutil.which("helm")
    if on_path:
        return on_path
    if os.access(CACHED_HELM, os.X_OK):
        return str(CACHED_HELM)
    return None


def run_helm(helm: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [helm, *args], capture_output=True, text=True, timeout=60, check=False, cwd=REPO_ROOT
    )


def values_args(values: dict[str, Any], tmp_dir: Path) -> list[str]:
    """Pass values as a file: nested dicts and lists survive better than in --set."""
    if not values:
        return []
    path = tmp_dir / "values.yaml"
    path.write_text(yaml.safe_dump(values))
    return ["--values", str(path)]


@dataclass(frozen=True)
class Rendering:
    """The objects of one `helm template` run, with lookups by kind and name."""

    manifests: list[Manifest]

    def of_kind(self, kind: str) -> list[Manifest]:
        return [m for m in self.manifests if m["kind"] == kind]

    def one(self, kind: str, name: str | None = None) -> Manifest:
        found = [m for m in self.of_kind(kind) if name is None or m["metadata"]["name"] == name]
        assert len(found) == 1, f"expected one {kind} {name or ''}, got {len(found)}"
        return found[0]

    def pod_specs(self) -> list[tuple[str, dict[str, Any]]]:
        """(kind/name, pod spec) of every workload."""
        specs = []
        for m in self.manifests:
            where = f"{m['kind']}/{m['metadata']['name']}"
            if m["kind"] in {"Deployment", "StatefulSet", "DaemonSet", "ReplicaSet", "Job"}:
                specs.append((where, m["spec"]["template"]["spec"]))
            elif m["kind"] == "CronJob":
                specs.append((where, m["spec"]["jobTemplate"]["spec"]["template"]["spec"]))
            elif m["kind"] == "Pod":
                specs.append((where, m["spec"]))
        return specs


def render(helm: str, values: dict[str, Any], tmp_dir: Path, *extra: str) -> Rendering:
    result = run_helm(
        helm, "template", RELEASE, str(CHART_DIR), "--namespace", NAMESPACE,
        *values_args(values, tmp_dir), *extra,
    )
    assert result.returncode == 0, f"helm template failed:\n{result.stderr}"
    return Rendering(manifests=[d for d in yaml.safe_load_all(result.stdout) if d])


def render_error(helm: str, tmp_dir: Path, values: dict[str, Any], *sets: str) -> str:
    """Render values that must be rejected; return helm's error output."""
    args = [a for s in sets for a in ("--set", s)]
    result = run_helm(
        helm, "template", RELEASE, str(CHART_DIR), *values_args(values, tmp_dir), *args
    )
    assert result.returncode != 0, f"helm accepted bad values {values or sets}"
    return result.stderr


def load_crds(directory: Path) -> dict[str, Manifest]:
    """Every CRD in a directory, by its metadata.name."""
    crds = {}
    for path in sorted(directory.glob("*.yaml")):
        for doc in yaml.safe_load_all(path.read_text()):
            if doc and doc.get("kind") == "CustomResourceDefinition":
                crds[doc["metadata"]["name"]] = doc
    return crds


# The value variants every per-variant test runs on. Each is rendered once per test module.
VARIANTS: dict[str, dict[str, Any]] = {
    "defaults": {},
    "redis": {"redis": {"enabled": True}},
    "redis-existing-secret": {
        "redis": {"enabled": True, "auth": {"existingSecret": "my-redis"},
                  "persistence": {"enabled": False}},
        "exampleJobQueue": {"enabled": True},
    },
    "gitops-existing-secrets": {
        "redis": {"enabled": True, "architecture": "replication",
                  "auth": {"existingSecret": "redis-creds"}},
        "exampleJobQueue": {"enabled": True, "spec": {"api": {"enabled": True}},
                            "apiToken": {"existingSecret": "api-creds"}},
    },
    "redis-replication": {"redis": {"enabled": True, "architecture": "replication"},
                          "exampleJobQueue": {"enabled": True}},
    "network-policies": {
        "networkPolicy": {
            "enabled": True,
            "redis": {"extraIngress": [{"podSelector": {"matchLabels": {"app": "web"}}}]},
            "operator": {"metricsFrom": [],
                         "apiServerTo": [{"ipBlock": {"cidr": "10.0.0.0/8",
                                                      "except": ["10.1.0.0/16"]}}],
                         "dnsTo": [{"namespaceSelector": {}, "podSelector": {
                             "matchLabels": {"k8s-app": "kube-dns"}}}]},
        },
        "redis": {"enabled": True, "architecture": "replication"},
        "operator": {"watchNamespaces": ["team-a"]},
    },
    "namespaced": {"operator": {"watchNamespaces": ["team-a", "team-b"]}},
    "peering": {"operator": {"replicaCount": 2, "podDisruptionBudget": {"enabled": True}}},
    "peering-namespaced": {"operator": {"replicaCount": 3, "watchNamespaces": ["team-a"]}},
    "example-with-api": {
        "redis": {"enabled": True},
        "exampleJobQueue": {"enabled": True, "spec": {"api": {"enabled": True}}},
    },
    "minimal": {
        "operator": {
            "metrics": {"enabled": False},
            "livenessProbe": {"enabled": False},
            "readinessProbe": {"enabled": False},
            "serviceAccount": {"create": False, "name": "preexisting"},
            "rbac": {"create": False},
        },
        "exampleJobQueue": {"enabled": True,
                            "spec": {"redis": {"url": "redis://redis.example:6380/0"}}},
    },
}
