"""Constants and the operator's own settings (not a JobQueue's: those live in ``spec.py``).

``OperatorSettings`` is built once by ``__main__`` from the command line and environment, and
handed to the handlers through kopf's ``memo``. Defaults that a JobQueue may override sit here as
constants so the CRD, the renderer and the Helm chart agree on one value each.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Mapping
from typing import Any, Final

#: The worker image this operator release renders by default (the Helm chart uses the same tag).
DEFAULT_WORKER_IMAGE: Final = "ghcr.io/antre-dev/antre-worker:0.1.0"

#: API group, version and plural of the JobQueue resource.
GROUP: Final = "antre.dev"
VERSION: Final = "v1alpha1"
PLURAL: Final = "jobqueues"
KIND: Final = "JobQueue"
#: The finalizer kopf puts on every JobQueue it serves (kopf daemons need one), removed once
#: the JobQueue's daemon has stopped.
FINALIZER: Final = "antre.dev/operator"

#: Labels put on every child, and the selector parts the operator relies on.
LABEL_NAME: Final = "app.kubernetes.io/name"
LABEL_INSTANCE: Final = "app.kubernetes.io/instance"
LABEL_COMPONENT: Final = "app.kubernetes.io/component"
LABEL_MANAGED_BY: Final = "app.kubernetes.io/managed-by"
LABEL_JOBQUEUE: Final = "antre.dev/jobqueue"
MANAGED_BY: Final = "antre-operator"

#: The annotation the ReplicaSet controller reads to choose which pods to delete first.
POD_DELETION_COST: Final = "controller.kubernetes.io/pod-deletion-cost"
#: Seconds between ANTRE_GRACE_PERIOD and terminationGracePeriodSeconds, for releasing jobs.
RELEASE_MARGIN_S: Final = 5
#: Port of the worker's /metrics and /healthz (ANTRE_METRICS_PORT).
WORKER_METRICS_PORT: Final = 9100
#: Port the API container listens on (`antre api --port`).
API_CONTAINER_PORT: Final = 8080
#: UID/GID every pod runs as (the images create this user).
RUN_AS_USER: Final = 10001

DEFAULT_WORKER_RESOURCES: Final[Mapping[str, Any]] = {
    "requests": {"cpu": "100m", "memory": "128Mi"},
    "limits": {"memory": "512Mi"},
}
DEFAULT_REAPER_RESOURCES: Final[Mapping[str, Any]] = {
    "requests": {"cpu": "10m", "memory": "64Mi"},
    "limits": {"memory": "128Mi"},
}
DEFAULT_API_RESOURCES: Final[Mapping[str, Any]] = {
    "requests": {"cpu": "50m", "memory": "96Mi"},
    "limits": {"memory": "256Mi"},
}


@dataclasses.dataclass(frozen=True)
class JobQueuePolicy:
    """What a JobQueue may ask for beyond a valid spec (``policy.py`` enforces it).

    Creating a JobQueue is creating Deployments in its namespace; these limits keep the
    operator's own identity out of reach and let a cluster narrow what JobQueue authors get.
    """

    operator_namespace: str | None = None
    """The operator's namespace (env POD_NAMESPACE). JobQueues there are refused unless
    ``allow_operator_namespace``; None: unknown (run outside a pod), nothing refused for it."""

    operator_service_account: str | None = None
    """The operator's ServiceAccount (env ANTRE_OPERATOR_SERVICE_ACCOUNT); a JobQueue in its
    namespace naming it is always refused."""

    allow_operator_namespace: bool = False
    """Serve JobQueues in the operator's own namespace (the chart's example JobQueue)."""

    image_registries: tuple[str, ...] = ()
    """Image prefixes workers may come from ("ghcr.io/acme", "docker.io/library/python");
    empty: any image."""

    service_accounts: tuple[str, ...] = ()
    """ServiceAccount names JobQueues may name in spec.worker.serviceAccountName; empty: any
    (but the operator's). Pods without one run as "default" with no token mounted."""

    redis_hosts: tuple[str, ...] = ()
    """Host name patterns (fnmatch: "*.redis.svc.cluster.local") the operator connects to for
    a JobQueue; empty: any host."""

    api_service_types: tuple[str, ...] = ()
    """Service types spec.api.serviceType may name ("ClusterIP"); empty: any. The chart allows
    ClusterIP alone by default: a NodePort or LoadBalancer puts a JobQueue's API (plain HTTP,
    bearer tokens) outside the cluster, which is more than creating Deployments."""


@dataclasses.dataclass(frozen=True)
class OperatorSettings:
    """How this operator process runs; one instance per process."""

    namespaces: tuple[str, ...] = ()
    """Namespaces (or kopf glob patterns) to serve; empty means cluster-wide."""

    peering: str | None = None
    """kopf peering object name; None runs standalone (one replica, no peering)."""

    priority: int = 0
    """kopf peering priority: with --peering, only the highest-priority replica acts."""

    metrics_port: int | None = 8000
    """Port of the operator's /metrics; None disables the endpoint."""

    redis_timeout_s: float = 5.0
    """Deadline of one Redis round trip (depth, workers, config check), seconds."""

    eviction_check_interval_s: float = 300.0
    """How often the maxmemory-policy is re-checked per JobQueue, seconds (once at connect too)."""

    polling_interval_override_s: float | None = None
    """Replaces every JobQueue's pollingIntervalSeconds when set (tests; never in production)."""

    watch_server_timeout_s: int = 300
    """Server-side timeout of one watch request: the watch is re-established at least this often."""

    watch_client_timeout_s: int = 330
    """Client-side deadline of one watch request, so a silently dead connection is noticed."""

    api_request_timeout_s: float = 30.0
    """Deadline of one Kubernetes API request made by ``kube.py``, seconds."""

    policy: JobQueuePolicy = JobQueuePolicy()
    """What JobQueues may ask for (allow-lists, the operator's own namespace and account)."""

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None,
                 **overrides: Any) -> OperatorSettings:
        """Defaults, then ANTRE_OPERATOR_* variables, then explicit overrides (the CLI flags)."""
        env = os.environ if environ is None else environ
        values: dict[str, Any] = {}
        for field, variable, convert in (
            ("redis_timeout_s", "ANTRE_OPERATOR_REDIS_TIMEOUT", float),
            ("eviction_check_interval_s", "ANTRE_OPERATOR_EVICTION_CHECK_INTERVAL", float),
            ("polling_interval_override_s", "ANTRE_OPERATOR_POLLING_INTERVAL", float),
        ):
            raw = env.get(variable)
            if raw:
                try:
                    values[field] = convert(raw)
                except ValueError:
                    raise ValueError(
                        f"{variable}: got {raw!r}; must be a number of seconds") from None
                if values[field] <= 0:
                    raise ValueError(f"{variable}: got {raw!r}; must be > 0")
        policy = overrides.pop("policy", None) or JobQueuePolicy()
        values["policy"] = dataclasses.replace(
            policy,
            operator_namespace=policy.operator_namespace or env.get("POD_NAMESPACE") or None,
            operator_service_account=(policy.operator_service_account
                                      or env.get("ANTRE_OPERATOR_SERVICE_ACCOUNT") or None))
        values.update(overrides)
        return cls(**values)
