"""Render a JobQueue's children as plain manifests: pure functions, no I/O.

One function per child: the worker Deployment, the reaper CronJob and, when ``spec.api.enabled``,
the API Deployment and Service. Every child carries an ownerReference to its JobQueue (so deleting
the JobQueue deletes it) and the labels in ``settings`` (so the operator's watches find it).
Every pod meets the "restricted" Pod Security Standard. ``kube.py`` applies what is rendered here;
the tests validate each manifest against the Kubernetes OpenAPI schemas.
"""

from __future__ import annotations

import copy
import dataclasses
import decimal
import re
from collections.abc import Mapping
from typing import Any, Final

from antre import fields, redis_urls
from antre.settings import QueueSettings, WorkerSettings

from antre_operator import settings, spec

#: The longest JobQueue name whose children all have valid names ("<name>-reaper" <= 52 chars,
#: the CronJob limit, which leaves room for the Job suffix the CronJob controller appends).
MAX_NAME_LENGTH: Final = 45

Manifest = dict[str, Any]


def worker_name(jobqueue: str) -> str:
    return f"{jobqueue}-worker"


def reaper_name(jobqueue: str) -> str:
    return f"{jobqueue}-reaper"


def api_name(jobqueue: str) -> str:
    return f"{jobqueue}-api"


def check_name(name: str) -> None:
    if len(name) > MAX_NAME_LENGTH:
        raise spec.InvalidSpec("metadata.name", name,
                               f"must be at most {MAX_NAME_LENGTH} characters so that the child "
                               f"'{reaper_name(name)}' fits the CronJob name limit")


def selector_labels(jobqueue: str, component: str) -> dict[str, str]:
    return {settings.LABEL_JOBQUEUE: jobqueue, settings.LABEL_COMPONENT: component}


def worker_selector(jobqueue: str) -> str:
    """The label selector of the worker pods, as status.selector (the /scale subresource) has it."""
    return ",".join(f"{k}={v}" for k, v in selector_labels(jobqueue, "worker").items())


def _labels(jobqueue: str, component: str) -> dict[str, str]:
    return {
        settings.LABEL_NAME: "antre",
        settings.LABEL_INSTANCE: jobqueue,
        settings.LABEL_MANAGED_BY: settings.MANAGED_BY,
        **selector_labels(jobqueue, component),
    }


def _metadata(jq: spec.JobQueueSpec, owner_uid: str, name: str,
              component: str) -> dict[str, Any]:
    return {
        "name": name,
        "namespace": jq.namespace,
        "labels": _labels(jq.name, component),
        "ownerReferences": [{
            "apiVersion": f"{settings.GROUP}/{settings.VERSION}",
            "kind": settings.KIND,
            "name": jq.name,
            "uid": owner_uid,
            "controller": True,
            "blockOwnerDeletion": True,
        }],
    }


def _secret_env(name: str, ref: spec.SecretKeyRef) -> dict[str, Any]:
    return {"name": name, "valueFrom": {"secretKeyRef": {"name": ref.name, "key": ref.key}}}


def _redis_env(jq: spec.JobQueueSpec) -> list[dict[str, Any]]:
    """Where the queue is: the URL (from a Secret whenever one is given), the queue and prefix."""
    if jq.redis.url_secret is not None:
        url = _secret_env("ANTRE_REDIS_URL", jq.redis.url_secret)
    else:
        # spec.py refused any plain URL with a password in it, so this value holds no secret.
        url = {"name": "ANTRE_REDIS_URL", "value": jq.redis.url}
    durable = {"durable_replicas": jq.redis.durable_replicas,
               "durable_timeout_s": jq.redis.durable_timeout_s} if jq.redis.durable_replicas else {}
    # With spec.redis.tls the pods refuse a URL without TLS themselves: the Secret may change
    # after the operator checked it, and a pod would then send the password in clear.
    tls = [{"name": redis_urls.REQUIRE_TLS_ENV, "value": "true"}] if jq.redis.tls else []
    return [url, *tls, *fields.env_entries(QueueSettings, {"name": jq.redis.queue,
                                                           "prefix": jq.redis.prefix, **durable})]


def _pod_name_env() -> dict[str, Any]:
    # The worker registry records it, so the operator can map jobs in flight to pods.
    return {"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}}


def _job_policy_env(worker: spec.WorkerSpec) -> list[dict[str, Any]]:
    return [
        *fields.env_entries(WorkerSettings, {"visibility_timeout_s": worker.visibility_timeout_s}),
        *fields.env_entries(QueueSettings, {"max_attempts": worker.max_attempts}),
        *fields.env_entries(WorkerSettings, {"backoff.base_s": worker.backoff_base_s,
                                             "backoff.max_s": worker.backoff_max_s,
                                             "job_timeout_s": worker.job_timeout_s}),
    ]


def _container_security() -> dict[str, Any]:
    return {
        "allowPrivilegeEscalation": False,
        "readOnlyRootFilesystem": True,
        "runAsNonRoot": True,
        "runAsUser": settings.RUN_AS_USER,
        "runAsGroup": settings.RUN_AS_USER,
        "capabilities": {"drop": ["ALL"]},
        "seccompProfile": {"type": "RuntimeDefault"},
    }


def _pod_security() -> dict[str, Any]:
    return {
        "runAsNonRoot": True,
        "runAsUser": settings.RUN_AS_USER,
        "runAsGroup": settings.RUN_AS_USER,
        "fsGroup": settings.RUN_AS_USER,
        "seccompProfile": {"type": "RuntimeDefault"},
    }


def _pod_spec(worker: spec.WorkerSpec, containers: list[dict[str, Any]], *,
              restart_policy: str = "Always", grace_s: int | None = None) -> dict[str, Any]:
    """Pod-level fields shared by every child: scheduling, identity, security, a writable /tmp."""
    for container in containers:
        container["securityContext"] = _container_security()
        container["volumeMounts"] = [{"name": "tmp", "mountPath": "/tmp"}]
    pod: dict[str, Any] = {
        "containers": containers,
        "restartPolicy": restart_policy,
        "securityContext": _pod_security(),
        "volumes": [{"name": "tmp", "emptyDir": {}}],
        "enableServiceLinks": False,
    }
    if grace_s is not None:
        pod["terminationGracePeriodSeconds"] = grace_s
    # Every optional field is rendered, empty when the spec has none: patch_body turns an empty
    # value into null, so a field removed from the JobQueue is removed from the children too.
    # serviceAccountName is spelled out ("default") rather than nulled: the API server would
    # otherwise take it back from the deprecated alias serviceAccount, which still names the old
    # account. The default account's token is never mounted; for an account the user named,
    # the field is left out (null), so that ServiceAccount's own automount setting decides.
    pod["serviceAccountName"] = worker.service_account_name or "default"
    pod["automountServiceAccountToken"] = False if worker.service_account_name is None else None
    pod["nodeSelector"] = dict(worker.node_selector)
    pod["tolerations"] = [dict(t) for t in worker.tolerations]
    pod["affinity"] = dict(worker.affinity)
    pod["imagePullSecrets"] = [{"name": name} for name in worker.image_pull_secrets]
    return pod


def _pod_template(jobqueue: str, component: str, worker: spec.WorkerSpec,
                  pod: dict[str, Any]) -> dict[str, Any]:
    metadata: dict[str, Any] = {"labels": _labels(jobqueue, component)}
    if worker.pod_annotations:
        metadata["annotations"] = dict(worker.pod_annotations)
    return {"metadata": metadata, "spec": pod}


def _track_pod_annotations(manifest: Manifest, worker: spec.WorkerSpec) -> Manifest:
    """Record which pod annotations are ours (see :func:`prune_pod_annotations`)."""
    if worker.pod_annotations:
        manifest["metadata"]["annotations"] = {
            settings.POD_ANNOTATION_KEYS: ",".join(sorted(worker.pod_annotations))}
    return manifest


def _pod_template_metadata(manifest: Mapping[str, Any]) -> Mapping[str, Any] | None:
    spec_ = manifest.get("spec") or {}
    if manifest.get("kind") == "CronJob":
        spec_ = ((spec_.get("jobTemplate") or {}).get("spec")) or {}
    template = spec_.get("template")
    return None if template is None else template.get("metadata") or {}


def prune_pod_annotations(desired: Manifest, live: Mapping[str, Any] | None) -> Manifest:
    """``desired`` plus a null for each pod annotation the operator set before (listed in the
    live child's ``antre.dev/pod-annotation-keys``) that the spec no longer has, so the merge
    patch removes it. Annotations others put on the pod template (e.g. ``kubectl rollout
    restart``) are never touched."""
    if live is None or _pod_template_metadata(desired) is None:
        return desired
    live_annotations = (live.get("metadata") or {}).get("annotations") or {}
    ours_before = {k for k in str(live_annotations.get(settings.POD_ANNOTATION_KEYS) or "")
                   .split(",") if k}
    if not ours_before:
        return desired
    pruned = copy.deepcopy(desired)
    template_meta = _pod_template_metadata(pruned)
    assert isinstance(template_meta, dict)
    wanted = template_meta.setdefault("annotations", {})
    for key in sorted(ours_before - set(wanted)):
        wanted[key] = None
    if settings.POD_ANNOTATION_KEYS not in (pruned["metadata"].get("annotations") or {}):
        pruned["metadata"].setdefault("annotations", {})[settings.POD_ANNOTATION_KEYS] = None
    return pruned


def render_worker_deployment(jq: spec.JobQueueSpec, owner_uid: str, *, replicas: int) -> Manifest:
    """The worker pool; ``replicas`` is the operator's decision (autoscaler or spec.replicas)."""
    worker = jq.worker
    env = [
        *_redis_env(jq),
        *fields.env_entries(WorkerSettings, {"concurrency": worker.concurrency}),
        *_job_policy_env(worker),
        *fields.env_entries(WorkerSettings, {"grace_period_s": worker.release_grace_s,
                                             "metrics_port": settings.WORKER_METRICS_PORT}),
        _pod_name_env(),
    ]
    if worker.handlers:
        env.append({"name": "ANTRE_HANDLERS", "value": worker.handlers})
    # The API server drops an empty value: render "" as absent, or it would drift every poll.
    env.extend({k: v for k, v in item.items() if not (k == "value" and v == "")}
               for item in worker.env)
    probe = {"httpGet": {"path": "/healthz", "port": "metrics"}, "periodSeconds": 10,
             "timeoutSeconds": 3}
    container = {
        "name": "worker",
        "image": worker.image,
        "imagePullPolicy": worker.image_pull_policy,
        "command": ["antre"],
        "args": ["worker"],
        "env": env,
        "ports": [{"name": "metrics", "containerPort": settings.WORKER_METRICS_PORT,
                   "protocol": "TCP"}],
        "readinessProbe": {**probe, "failureThreshold": 3},
        "livenessProbe": {**probe, "initialDelaySeconds": 10, "failureThreshold": 6},
        "resources": dict(worker.resources),
    }
    pod = _pod_spec(worker, [container], grace_s=worker.termination_grace_period_s)
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": _metadata(jq, owner_uid, worker_name(jq.name), "worker"),
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": selector_labels(jq.name, "worker")},
            # New pods first, so a rollout never lowers the capacity; old ones drain gracefully.
            "strategy": {"type": "RollingUpdate",
                         "rollingUpdate": {"maxUnavailable": 0, "maxSurge": "25%"}},
            "template": _pod_template(jq.name, "worker", worker, pod),
        },
    }


def render_reaper_cronjob(jq: spec.JobQueueSpec, owner_uid: str) -> Manifest:
    """`antre reaper --once` on a schedule: requeues jobs whose leases expired."""
    container = {
        "name": "reaper",
        "image": jq.worker.image,
        "imagePullPolicy": jq.worker.image_pull_policy,
        "command": ["antre"],
        "args": ["reaper", "--once"],
        "env": [*_redis_env(jq), *_job_policy_env(jq.worker)],
        "resources": dict(jq.reaper.resources),
    }
    pod = _pod_spec(jq.worker, [container], restart_policy="Never")
    return {
        "apiVersion": "batch/v1",
        "kind": "CronJob",
        "metadata": _metadata(jq, owner_uid, reaper_name(jq.name), "reaper"),
        "spec": {
            "schedule": jq.reaper.schedule,
            "suspend": jq.reaper.suspend,
            "concurrencyPolicy": "Forbid",  # one reaper at a time; the next run catches up
            "startingDeadlineSeconds": 120,
            "successfulJobsHistoryLimit": 1,
            "failedJobsHistoryLimit": 3,
            "jobTemplate": {
                "metadata": {"labels": _labels(jq.name, "reaper")},
                "spec": {
                    "backoffLimit": 1,
                    "activeDeadlineSeconds": 600,
                    "ttlSecondsAfterFinished": 3600,
                    "template": _pod_template(jq.name, "reaper", jq.worker, pod),
                },
            },
        },
    }


def render_api_deployment(jq: spec.JobQueueSpec, owner_uid: str) -> Manifest:
    """The HTTP API (`antre api`), authenticated by the bearer token from tokenSecretRef."""
    assert jq.api.token_secret is not None, "spec.py requires tokenSecretRef when the API is on"
    # /readyz pings Redis, so a pod that lost Redis stops taking traffic; /healthz only says
    # the process answers, so an outage never restarts it.
    probe = {"periodSeconds": 10, "timeoutSeconds": 3}
    readiness = {**probe, "httpGet": {"path": "/readyz", "port": "http"}}
    liveness = {**probe, "httpGet": {"path": "/healthz", "port": "http"}}
    container = {
        "name": "api",
        "image": jq.worker.image,
        "imagePullPolicy": jq.worker.image_pull_policy,
        "command": ["antre"],
        "args": ["api", "--port", str(settings.API_CONTAINER_PORT), *_dashboard_args(jq.api)],
        # The API stamps max_attempts into every job it enqueues.
        "env": [*_redis_env(jq), _secret_env("ANTRE_API_TOKEN", jq.api.token_secret),
                *fields.env_entries(QueueSettings, {"max_attempts": jq.worker.max_attempts})],
        "ports": [{"name": "http", "containerPort": settings.API_CONTAINER_PORT,
                   "protocol": "TCP"}],
        "readinessProbe": readiness,
        "livenessProbe": {**liveness, "initialDelaySeconds": 10, "failureThreshold": 6},
        "resources": dict(jq.api.resources),
    }
    pod = _pod_spec(jq.worker, [container], grace_s=30)
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": _metadata(jq, owner_uid, api_name(jq.name), "api"),
        "spec": {
            "replicas": jq.api.replicas,
            "selector": {"matchLabels": selector_labels(jq.name, "api")},
            "template": _pod_template(jq.name, "api", jq.worker, pod),
        },
    }


def _dashboard_args(api: spec.ApiSpec) -> list[str]:
    """``antre api`` serves the dashboard (read-only on request) under /ui of the same port."""
    if not api.dashboard:
        return []
    return ["--dashboard-read-only" if api.dashboard_read_only else "--dashboard"]


def render_api_service(jq: spec.JobQueueSpec, owner_uid: str) -> Manifest:
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": _metadata(jq, owner_uid, api_name(jq.name), "api"),
        "spec": {
            "type": jq.api.service_type,
            "selector": selector_labels(jq.name, "api"),
            "ports": [{"name": "http", "port": jq.api.port, "targetPort": "http",
                       "protocol": "TCP"}],
        },
    }


@dataclasses.dataclass(frozen=True)
class Children:
    """Everything one JobQueue should own; ``absent`` lists (kind, name) that must not exist."""

    present: tuple[Manifest, ...]
    absent: tuple[tuple[str, str], ...]


def render_children(jq: spec.JobQueueSpec, owner_uid: str, *, replicas: int) -> Children:
    check_name(jq.name)
    present = [
        render_worker_deployment(jq, owner_uid, replicas=replicas),
        render_reaper_cronjob(jq, owner_uid),
    ]
    absent: list[tuple[str, str]] = []
    if jq.api.enabled:
        present += [render_api_deployment(jq, owner_uid), render_api_service(jq, owner_uid)]
    else:
        absent += [("Deployment", api_name(jq.name)), ("Service", api_name(jq.name))]
    for manifest in present:
        if _pod_template_metadata(manifest) is not None:
            _track_pod_annotations(manifest, jq.worker)
    return Children(present=tuple(present), absent=tuple(absent))


_QUANTITY_RE: Final = re.compile(
    r"^([+-]?(?:\d+\.?\d*|\.\d+))(Ki|Mi|Gi|Ti|Pi|Ei|[numkMGTPE]|[eE][+-]?\d+)?$")
_BINARY: Final = {"Ki": 1, "Mi": 2, "Gi": 3, "Ti": 4, "Pi": 5, "Ei": 6}
_DECIMAL: Final = {"n": -9, "u": -6, "m": -3, "k": 3, "M": 6, "G": 9, "T": 12, "P": 15, "E": 18}


def parse_quantity(value: Any) -> decimal.Decimal:
    """A Kubernetes resource quantity ("500m", "1Gi", 2, "1e3") as an exact number."""
    if isinstance(value, bool) or not isinstance(value, int | float | str):
        raise ValueError(f"not a quantity: {value!r}")
    match = _QUANTITY_RE.match(str(value).strip())
    if match is None:
        raise ValueError(f"not a quantity: {value!r}")
    number, suffix = decimal.Decimal(match.group(1)), match.group(2) or ""
    if suffix in _BINARY:
        return number * decimal.Decimal(1024) ** _BINARY[suffix]
    if suffix in _DECIMAL:
        return number.scaleb(_DECIMAL[suffix])
    if suffix:
        return number.scaleb(int(suffix[1:]))
    return number


def _same_quantity(desired: Any, live: Any) -> bool:
    """Equal as Kubernetes quantities: the API server stores them canonically (``cpu: 1`` as
    "1", "0.5" as "500m", 1024Mi as "1Gi"), so a literal comparison would see drift forever."""
    try:
        return bool(parse_quantity(desired) == parse_quantity(live))
    except (ValueError, decimal.InvalidOperation):
        return bool(desired == live)


def drifted(desired: Any, live: Any, *, quantities: bool = False) -> bool:
    """Does the live object differ from the desired one in anything the operator sets?

    Fields the API server or other controllers add (defaults, status, foreign annotations) are
    not drift; an empty or absent desired value matches an absent live one. Lists compare item by
    item, since a JSON merge patch replaces them whole. Leaves under a ``resources`` key
    (requests, limits) compare as quantities, whatever form the user wrote them in.
    """
    if isinstance(desired, Mapping):
        if not isinstance(live, Mapping):
            return True
        for key, value in desired.items():
            if value in (None, {}, []):
                if live.get(key) not in (None, {}, []):
                    return True
            elif key not in live or drifted(value, live[key],
                                            quantities=quantities or key == "resources"):
                return True
        return False
    if isinstance(desired, list):
        if not isinstance(live, list) or len(desired) != len(live):
            return True
        return any(drifted(d, v, quantities=quantities)
                   for d, v in zip(desired, live, strict=True))
    if isinstance(desired, bool) or isinstance(live, bool):
        return desired is not live
    if quantities:
        return not _same_quantity(desired, live)
    return bool(desired != live)
