"""Sample JobQueues and small helpers shared by the operator tests."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

from antre_operator import spec

ROOT = Path(__file__).resolve().parents[2]
CRD_PATH = ROOT / "crds" / "jobqueues.antre.dev.yaml"

MINIMAL: dict[str, Any] = {
    "apiVersion": "antre.dev/v1alpha1",
    "kind": "JobQueue",
    "metadata": {"name": "emails", "namespace": "default"},
    "spec": {"redis": {"urlSecretRef": {"name": "redis", "key": "url"}}},
}

FULL: dict[str, Any] = {
    "apiVersion": "antre.dev/v1alpha1",
    "kind": "JobQueue",
    "metadata": {"name": "thumbnails", "namespace": "media"},
    "spec": {
        "replicas": 2,
        "redis": {"urlSecretRef": {"name": "redis", "key": "url"}, "queue": "thumbs",
                  "prefix": "media", "tls": False},
        "worker": {
            "image": "registry.example.com/thumbs:1.2.3",
            "imagePullPolicy": "Always",
            "handlers": "thumbs.jobs,thumbs.more_jobs",
            "concurrency": 8,
            "visibilityTimeoutSeconds": 120,
            "jobTimeoutSeconds": 600,
            "maxAttempts": 7,
            "backoff": {"baseSeconds": 2, "maxSeconds": 600},
            "terminationGracePeriodSeconds": 660,
            "resources": {"requests": {"cpu": "500m", "memory": "1Gi"},
                          "limits": {"memory": "2Gi"}},
            "env": [{"name": "LOG_LEVEL", "value": "debug"},
                    {"name": "S3_KEY", "valueFrom": {"secretKeyRef": {"name": "s3",
                                                                      "key": "key"}}}],
            "nodeSelector": {"pool": "batch"},
            "tolerations": [{"key": "batch", "operator": "Exists", "effect": "NoSchedule"}],
            "affinity": {"podAntiAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [
                {"weight": 50, "podAffinityTerm": {
                    "topologyKey": "kubernetes.io/hostname",
                    "labelSelector": {"matchLabels": {"antre.dev/jobqueue": "thumbnails"}}}}]}},
            "serviceAccountName": "thumbs",
            "imagePullSecrets": [{"name": "registry"}],
            "podAnnotations": {"prometheus.io/scrape": "true"},
        },
        "autoscaling": {"enabled": True, "minReplicas": 1, "maxReplicas": 20,
                        "targetBacklogPerReplica": 50, "activationBacklog": 5,
                        "pollingIntervalSeconds": 10, "scaleDownStabilizationSeconds": 120,
                        "cooldownSeconds": 600, "maxScaleUpStep": 4},
        "reaper": {"schedule": "*/2 * * * *", "suspend": False,
                   "resources": {"requests": {"cpu": "20m"}}},
        "api": {"enabled": True, "replicas": 2, "serviceType": "LoadBalancer", "port": 8443,
                "tokenSecretRef": {"name": "api-token", "key": "token"}},
    },
}


def sample(base: dict[str, Any], **spec_changes: Any) -> dict[str, Any]:
    """A deep copy of ``base`` with top-level spec keys replaced (None deletes the key)."""
    body = copy.deepcopy(base)
    for key, value in spec_changes.items():
        if value is None:
            body["spec"].pop(key, None)
        else:
            body["spec"][key] = value
    return body


def parse(body: dict[str, Any]) -> spec.JobQueueSpec:
    return spec.parse_jobqueue(name=body["metadata"]["name"],
                               namespace=body["metadata"]["namespace"], spec=body["spec"])


OWNER_UID = "0000-1111"
