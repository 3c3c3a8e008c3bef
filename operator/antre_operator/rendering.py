"""Render a JobQueue's children as plain manifests: pure functions, no I/O.

One function per child: the worker Deployment, the reaper CronJob and, when ``spec.api.enabled``,
the API Deployment and Service. Every child carries an ownerReference to its JobQueue (so deleting
the JobQueue deletes it) and the labels in ``settings`` (so the operator's watches find it).
Every pod meets the "restricted" Pod Security Standard. ``kube.py`` applies what is rendered here
(server-side apply), so a manifest names only what the operator sets: a field left out is one the
API server removes if the operator set it before. The tests validate each manifest against the
Kubernetes OpenAPI schemas.
"""

from __future__ import annotations

import dataclasses
import re
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


def child_names(jobqueue: str) -> tuple[tuple[str, str], ...]:
    """(kind, name) of every child a JobQueue may have."""
    return (("Deployment", worker_name(jobqueue)), ("CronJob", reaper_name(jobqueue)),
            ("Deployment", api_name(jobqueue)), ("Service", api_name(jobqueue)))


def jobqueue_of_child(kind: str, name: str) -> str | None:
    """The JobQueue whose child (see :func:`child_names`) an object of ``kind`` named ``name``
    would be, or None: ``q-worker`` -> ``q``. Each kind's suffixes are distinct, so there is at
    most one."""
    for child_kind, suffix in child_names(""):
        owner = name.removesuffix(suffix)
        if child_kind == kind and owner and owner != name:
            return owner
    return None


#: A Service's name (RFC 1035 label): a JobQueue's own name may also hold dots or start with a
#: digit, which its API's Service could not.
_SERVICE_NAME_RE: Final = re.compile(r"[a-z]([-a-z0-9]*[a-z0-9])?")


def check_name(jq: spec.JobQueueSpec) -> None:
    """Refuses a JobQueue name its children could not carry."""
    if len(jq.name) > MAX_NAME_LENGTH:
        raise spec.InvalidSpec("metadata.name", jq.name,
                               f"must be at most {MAX_NAME_LENGTH} characters so that the child "
                               f"'{reaper_name(jq.name)}' fits the CronJob name limit")
    if jq.api.enabled and not _SERVICE_NAME_RE.fullmatch(jq.name):
        raise spec.InvalidSpec("metadata.name", jq.name,
                               "must start with a letter and hold only lower case letters, digits "
                               "and '-' while spec.api.enabled is true, so that its Service "
                               f"'{api_name(jq.name)}' is a valid Service name")


def selector_labels(jobqueue: str, component: str) -> dict[str, str]:
    return {settings.LABEL_JOBQUEUE: jobqueue, settings.LABEL_COMPONENT: component}


def pod_selector(jobqueue: str, component: str) -> str:
    """The label selector of a component's pods, as kubectl's -l takes it."""
    return ",".join(f"{k}={v}" for k, v in selector_labels(jobqueue, component).items())


def worker_selector(jobqueue: str) -> str:
    """The label selector of the worker pods, as status.selector (the /scale subresource) has it."""
    return pod_selector(jobqueue, "worker")


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
              restart_policy: str = "Always", grace_s: int | None = None,
              runs_handlers: bool = False) -> dict[str, Any]:
    """Pod-level fields shared by every child: scheduling, identity, security, a writable /tmp.
    Only pods that ``runs_handlers`` (the workers) run as spec.worker.serviceAccountName: the
    reaper and the API need Redis alone, not the Kubernetes or cloud identity the handlers'
    account may carry (its token, or a cloud role bound to it)."""
    for container in containers:
        container["securityContext"] = _container_security()
        container["volumeMounts"] = [{"name": "tmp", "mountPath": "/tmp"}]
        # A container that fails at start (a handlers module that does not import) says why in
        # its pod status, where the JobQueue's Ready condition quotes it.
        container["terminationMessagePolicy"] = "FallbackToLogsOnError"
    pod: dict[str, Any] = {
        "containers": containers,
        "restartPolicy": restart_policy,
        "securityContext": _pod_security(),
        "volumes": [{"name": "tmp", "emptyDir": {}}],
        "enableServiceLinks": False,
    }
    if grace_s is not None:
        pod["terminationGracePeriodSeconds"] = grace_s
    # Optional fields only when the spec has them: one the operator applied before and no longer
    # applies is removed by the API server. serviceAccountName is spelled out ("default") rather
    # than left out: the API server would otherwise take it back from the deprecated alias
    # serviceAccount, which still names the old account. The default account's token is never
    # mounted; for an account the user named, the field is left out, so that ServiceAccount's
    # own automount setting decides.
    account = worker.service_account_name if runs_handlers else None
    pod["serviceAccountName"] = account or "default"
    if account is None:
        pod["automountServiceAccountToken"] = False
    if worker.node_selector:
        pod["nodeSelector"] = dict(worker.node_selector)
    if worker.tolerations:
        pod["tolerations"] = [dict(t) for t in worker.tolerations]
    if worker.affinity:
        pod["affinity"] = dict(worker.affinity)
    if worker.image_pull_secrets:
        pod["imagePullSecrets"] = [{"name": name} for name in worker.image_pull_secrets]
    return pod


#: The fields of every child's pod template that come straight from the JobQueue's spec (the CRD
#: leaves some free-form, so only the API server finds a bad value in them).
_POD_FIELDS_FROM_SPEC: Final = {
    "spec.affinity": "spec.worker.affinity",
    "spec.tolerations": "spec.worker.tolerations",
    "spec.nodeSelector": "spec.worker.nodeSelector",
    "spec.imagePullSecrets": "spec.worker.imagePullSecrets",
    "spec.serviceAccountName": "spec.worker.serviceAccountName",
    "metadata.annotations": "spec.worker.podAnnotations",
}
_TEMPLATE_PATH: Final = re.compile(r"\bspec\.(?:jobTemplate\.spec\.)?template\.([\w.\[\]]+)")
#: Fields of a child outside its pod template that come straight from the JobQueue's spec.
_CHILD_FIELDS_FROM_SPEC: Final = {"spec.schedule": "spec.reaper.schedule"}
_CHILD_PATH: Final = re.compile(r"(?<![\w.])(spec\.schedule)\b")
#: A container's fields that come from the JobQueue: its resources (each component has its
#: own) and, in the worker's, the user's env entries (``env[12].valueFrom...``: the index and
#: the rest of the path).
_CONTAINER_PATH: Final = re.compile(
    r"^spec\.(?:initC|c)ontainers\[[^\]]*\]\.(env|resources)\b(?:\[(\d+)\]([\w.]*))?")
#: The child an API server's validation error is about: ``Deployment.apps "q-api" is invalid``.
_REFUSED_CHILD: Final = re.compile(r'"[^"]*-(worker|api)" is invalid')


def _component(message: str, template_path: str) -> str:
    """The component whose pod template a refusal's path is in: a CronJob's is the reaper's;
    a Deployment's is named in the message (the worker's when it is not)."""
    if "jobTemplate" in template_path:
        return "reaper"
    named = _REFUSED_CHILD.search(message)
    return named.group(1) if named else "worker"


def spec_fields_named(message: str, *, worker_env_start: int | None = None) -> list[str]:
    """The JobQueue fields behind the child paths an API server's refusal names
    (``spec.template.spec.affinity.nodeAffinity...`` -> ``spec.worker.affinity``,
    ``...containers[0].resources.requests`` of the API's Deployment -> ``spec.api.resources``,
    a CronJob's ``spec.schedule`` -> ``spec.reaper.schedule``), in order. With
    ``worker_env_start`` (:func:`worker_env_start`), a worker's ``env[N]`` is named as the
    JobQueue's own entry: ``...env[12].valueFrom.fieldRef`` -> ``spec.worker.env[0].valueFrom.
    fieldRef`` when the operator's entries are the first 12."""
    found: list[str] = []

    def add(jobqueue_field: str) -> None:
        if jobqueue_field not in found:
            found.append(jobqueue_field)

    for match in _CHILD_PATH.finditer(message):
        add(_CHILD_FIELDS_FROM_SPEC[match.group(1)])
    for match in _TEMPLATE_PATH.finditer(message):
        path = match.group(1)
        for child_field, jobqueue_field in _POD_FIELDS_FROM_SPEC.items():
            if path == child_field or path.startswith((child_field + ".", child_field + "[")):
                add(jobqueue_field)
        container = _CONTAINER_PATH.match(path)
        if container is None:
            continue
        component = _component(message, match.group(0))
        if container.group(1) == "resources":
            add(f"spec.{component}.resources")
        elif component == "worker":  # the other containers' env is the operator's alone
            add(_user_env_field(container, worker_env_start))
    return found


def _user_env_field(container: re.Match[str], worker_env_start: int | None) -> str:
    """``spec.worker.env``, with the user's index and the rest of the path when known."""
    index = container.group(2)
    if worker_env_start is None or index is None or int(index) < worker_env_start:
        return "spec.worker.env"
    return f"spec.worker.env[{int(index) - worker_env_start}]{container.group(3)}"


def _pod_template(jobqueue: str, component: str, worker: spec.WorkerSpec,
                  pod: dict[str, Any]) -> dict[str, Any]:
    metadata: dict[str, Any] = {"labels": _labels(jobqueue, component)}
    if worker.pod_annotations:
        metadata["annotations"] = dict(worker.pod_annotations)
    return {"metadata": metadata, "spec": pod}


def _operator_worker_env(jq: spec.JobQueueSpec) -> list[dict[str, Any]]:
    """The worker container's env entries the operator sets, before the user's spec.worker.env."""
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
    return env


def worker_env_start(jq: spec.JobQueueSpec) -> int:
    """The index in the worker container's env of spec.worker.env[0]."""
    return len(_operator_worker_env(jq))


def render_worker_deployment(jq: spec.JobQueueSpec, owner_uid: str, *, replicas: int) -> Manifest:
    """The worker pool; ``replicas`` is the operator's decision (autoscaler or spec.replicas)."""
    worker = jq.worker
    env = _operator_worker_env(jq)
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
    pod = _pod_spec(worker, [container], grace_s=worker.termination_grace_period_s,
                    runs_handlers=True)
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


def render_reaper_cronjob(jq: spec.JobQueueSpec, owner_uid: str, *,
                          at_rest: bool = False) -> Manifest:
    """`antre reaper --once` on a schedule: requeues jobs whose leases expired. Suspended by
    ``spec.reaper.suspend``, and while the queue is ``at_rest`` (see
    :func:`antre_operator.scaling.reaper_at_rest`)."""
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
            "suspend": jq.reaper.suspend or at_rest,
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
    args = ["--dashboard-read-only" if api.dashboard_read_only else "--dashboard"]
    if api.dashboard_trusted_proxies:
        args += ["--dashboard-trusted-proxies", ",".join(api.dashboard_trusted_proxies)]
    return args


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


def render_children(jq: spec.JobQueueSpec, owner_uid: str, *, replicas: int,
                    reaper_at_rest: bool = False) -> Children:
    check_name(jq)
    present = [
        render_worker_deployment(jq, owner_uid, replicas=replicas),
        render_reaper_cronjob(jq, owner_uid, at_rest=reaper_at_rest),
    ]
    absent: list[tuple[str, str]] = []
    if jq.api.enabled:
        present += [render_api_deployment(jq, owner_uid), render_api_service(jq, owner_uid)]
    else:
        absent += [("Deployment", api_name(jq.name)), ("Service", api_name(jq.name))]
    return Children(present=tuple(present), absent=tuple(absent))
