"""Rendering the children of a JobQueue.

Aspects: every manifest is valid against the Kubernetes OpenAPI schemas (kubernetes-validate,
strict: unknown fields fail); every pod meets the restricted Pod Security Standard; secrets only
travel as secretKeyRef; ownership and labels; the worker contract (env, probes, grace period);
optional pod fields only when the spec sets them (server-side apply removes one the operator no
longer applies; tests/e2e shows it on the real API server).
"""

from __future__ import annotations

from typing import Any

import kubernetes_validate
import pytest
from antre_operator import rendering, settings
from operator_samples import FULL, MINIMAL, OWNER_UID, parse, sample

K8S_VERSION = "1.30"

SPECS = [
    pytest.param(MINIMAL, id="minimal"),
    pytest.param(FULL, id="full"),
    pytest.param(sample(MINIMAL, redis={"url": "redis://redis.antre:6380/0"}), id="plain-url"),
    pytest.param(sample(MINIMAL, api={"enabled": True, "tokenSecretRef": {"name": "tok"}},
                        reaper={"suspend": True}), id="api-defaults"),
]


def all_manifests(body: dict[str, Any], replicas: int = 3) -> list[dict[str, Any]]:
    return list(rendering.render_children(parse(body), OWNER_UID, replicas=replicas).present)


def pod_specs(manifest: dict[str, Any]) -> dict[str, Any] | None:
    if manifest["kind"] == "Deployment":
        return dict(manifest["spec"]["template"]["spec"])
    if manifest["kind"] == "CronJob":
        return dict(manifest["spec"]["jobTemplate"]["spec"]["template"]["spec"])
    return None


def env_of(manifest: dict[str, Any]) -> dict[str, dict[str, Any]]:
    pod = pod_specs(manifest)
    assert pod is not None
    return {e["name"]: e for e in pod["containers"][0]["env"]}


@pytest.mark.parametrize("body", SPECS)
def test_manifests_are_valid_kubernetes(body: dict[str, Any]) -> None:
    manifests = all_manifests(body)
    assert {m["kind"] for m in manifests} >= {"Deployment", "CronJob"}
    for manifest in manifests:
        kubernetes_validate.validate(manifest, K8S_VERSION, strict=True)


@pytest.mark.parametrize("body", SPECS)
def test_pods_are_restricted(body: dict[str, Any]) -> None:
    for manifest in all_manifests(body):
        pod = pod_specs(manifest)
        if pod is None:
            continue
        assert pod["securityContext"]["runAsNonRoot"] is True
        assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
        assert "hostNetwork" not in pod and "hostPID" not in pod
        for container in pod["containers"]:
            sc = container["securityContext"]
            assert sc["allowPrivilegeEscalation"] is False
            assert sc["capabilities"] == {"drop": ["ALL"]}
            assert sc["runAsUser"] == settings.RUN_AS_USER
            assert sc["readOnlyRootFilesystem"] is True
            assert {"name": "tmp", "mountPath": "/tmp"} in container["volumeMounts"]
        assert {"name": "tmp", "emptyDir": {}} in pod["volumes"]


@pytest.mark.parametrize("body", SPECS)
def test_children_are_owned_and_labelled(body: dict[str, Any]) -> None:
    for manifest in all_manifests(body):
        meta = manifest["metadata"]
        [ref] = meta["ownerReferences"]
        assert ref == {"apiVersion": "antre.dev/v1alpha1", "kind": "JobQueue",
                       "name": parse(body).name, "uid": OWNER_UID, "controller": True,
                       "blockOwnerDeletion": True}
        assert meta["namespace"] == parse(body).namespace
        assert meta["labels"][settings.LABEL_MANAGED_BY] == settings.MANAGED_BY
        assert meta["labels"][settings.LABEL_JOBQUEUE] == parse(body).name


def test_worker_contract() -> None:
    jq = parse(FULL)
    deployment = rendering.render_worker_deployment(jq, OWNER_UID, replicas=7)
    assert deployment["metadata"]["name"] == "thumbnails-worker"
    assert deployment["spec"]["replicas"] == 7
    pod = deployment["spec"]["template"]["spec"]
    container = pod["containers"][0]
    assert container["command"] == ["antre"] and container["args"] == ["worker"]
    assert container["image"] == "registry.example.com/thumbs:1.2.3"
    env = env_of(deployment)
    assert env["ANTRE_REDIS_URL"] == {"name": "ANTRE_REDIS_URL", "valueFrom": {
        "secretKeyRef": {"name": "redis", "key": "url"}}}
    values = {k: v.get("value") for k, v in env.items()}
    assert values["ANTRE_QUEUE"] == "thumbs" and values["ANTRE_PREFIX"] == "media"
    assert values["ANTRE_HANDLERS"] == "thumbs.jobs,thumbs.more_jobs"
    assert values["ANTRE_CONCURRENCY"] == "8"
    assert values["ANTRE_VISIBILITY_TIMEOUT"] == "120"
    assert values["ANTRE_JOB_TIMEOUT"] == "600"
    assert values["ANTRE_MAX_ATTEMPTS"] == "7"
    assert (values["ANTRE_BACKOFF_BASE"], values["ANTRE_BACKOFF_MAX"]) == ("2", "600")
    assert values["ANTRE_METRICS_PORT"] == "9100"
    assert values["LOG_LEVEL"] == "debug"
    assert env["POD_NAME"]["valueFrom"] == {"fieldRef": {"fieldPath": "metadata.name"}}
    assert pod["terminationGracePeriodSeconds"] == 660
    assert values["ANTRE_GRACE_PERIOD"] == str(660 - settings.RELEASE_MARGIN_S)
    assert container["readinessProbe"]["httpGet"] == {"path": "/healthz", "port": "metrics"}
    assert pod["serviceAccountName"] == "thumbs"
    assert pod["nodeSelector"] == {"pool": "batch"}
    assert pod["imagePullSecrets"] == [{"name": "registry"}]
    assert deployment["spec"]["template"]["metadata"]["annotations"] == {
        "prometheus.io/scrape": "true"}
    assert deployment["spec"]["selector"]["matchLabels"] == {
        "antre.dev/jobqueue": "thumbnails", "app.kubernetes.io/component": "worker"}
    assert rendering.worker_selector("thumbnails") == (
        "antre.dev/jobqueue=thumbnails,app.kubernetes.io/component=worker")


def test_default_image_and_no_service_account_token() -> None:
    deployment = rendering.render_worker_deployment(parse(MINIMAL), OWNER_UID, replicas=0)
    pod = deployment["spec"]["template"]["spec"]
    assert pod["containers"][0]["image"] == settings.DEFAULT_WORKER_IMAGE
    assert pod["automountServiceAccountToken"] is False
    assert "ANTRE_JOB_TIMEOUT" not in env_of(deployment)
    assert "ANTRE_HANDLERS" not in env_of(deployment)


def test_plain_url_is_a_value() -> None:
    jq = parse(sample(MINIMAL, redis={"url": "redis://redis.antre:6380/0"}))
    env = env_of(rendering.render_worker_deployment(jq, OWNER_UID, replicas=1))
    assert env["ANTRE_REDIS_URL"]["value"] == "redis://redis.antre:6380/0"


def test_reaper_cronjob() -> None:
    cronjob = rendering.render_reaper_cronjob(parse(FULL), OWNER_UID)
    assert cronjob["metadata"]["name"] == "thumbnails-reaper"
    assert cronjob["spec"]["schedule"] == "*/2 * * * *"
    assert cronjob["spec"]["concurrencyPolicy"] == "Forbid"
    container = pod_specs(cronjob)["containers"][0]  # type: ignore[index]
    assert container["args"] == ["reaper", "--once"]
    assert "ANTRE_REDIS_URL" in env_of(cronjob)


def test_api_children() -> None:
    children = rendering.render_children(parse(FULL), OWNER_UID, replicas=1)
    kinds = {(m["kind"], m["metadata"]["name"]) for m in children.present}
    assert ("Deployment", "thumbnails-api") in kinds and ("Service", "thumbnails-api") in kinds
    api = next(m for m in children.present if m["metadata"]["name"] == "thumbnails-api"
               and m["kind"] == "Deployment")
    assert api["spec"]["replicas"] == 2
    assert pod_specs(api)["containers"][0]["args"] == ["api", "--port", "8080"]  # type: ignore[index]
    assert env_of(api)["ANTRE_API_TOKEN"]["valueFrom"] == {
        "secretKeyRef": {"name": "api-token", "key": "token"}}
    service = next(m for m in children.present if m["kind"] == "Service")
    assert service["spec"]["type"] == "LoadBalancer"
    assert service["spec"]["ports"][0]["port"] == 8443
    assert children.absent == ()


@pytest.mark.parametrize(("dashboard", "args"), [
    pytest.param({}, [], id="off"),
    pytest.param({"enabled": True}, ["--dashboard"], id="on"),
    pytest.param({"enabled": True, "readOnly": True}, ["--dashboard-read-only"], id="read-only"),
    pytest.param({"readOnly": True}, [], id="read-only-but-off"),
    pytest.param({"enabled": True, "trustedProxies": ["10.244.0.0/16", "fd00::1"]},
                 ["--dashboard", "--dashboard-trusted-proxies", "10.244.0.0/16,fd00::1/128"],
                 id="trusted-proxies"),
    pytest.param({"trustedProxies": ["10.244.0.0/16"]}, [], id="trusted-proxies-but-off"),
])
def test_api_dashboard_flags(dashboard: dict[str, Any], args: list[str]) -> None:
    jq = parse(sample(MINIMAL, api={"enabled": True, "tokenSecretRef": {"name": "tok"},
                                    "dashboard": dashboard}))
    api = next(m for m in rendering.render_children(jq, OWNER_UID, replicas=1).present
               if m["kind"] == "Deployment" and m["metadata"]["name"] == "emails-api")
    assert pod_specs(api)["containers"][0]["args"] == ["api", "--port", "8080", *args]  # type: ignore[index]


def test_api_disabled_is_absent() -> None:
    children = rendering.render_children(parse(MINIMAL), OWNER_UID, replicas=1)
    assert children.absent == (("Deployment", "emails-api"), ("Service", "emails-api"))


def test_name_too_long_is_refused() -> None:
    body = {**MINIMAL, "metadata": {"name": "n" * 46, "namespace": "default"}}
    with pytest.raises(ValueError, match=r"metadata\.name"):
        rendering.render_children(parse(body), OWNER_UID, replicas=1)


def pod_templates(manifests: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [m["spec"]["jobTemplate"]["spec"]["template"] if m["kind"] == "CronJob"
            else m["spec"]["template"] for m in manifests if m["kind"] != "Service"]


def test_optional_pod_fields_only_when_the_spec_sets_them() -> None:
    for template in pod_templates(all_manifests(MINIMAL)):
        pod = template["spec"]
        for field in ("nodeSelector", "tolerations", "affinity", "imagePullSecrets"):
            assert field not in pod, field
        assert "annotations" not in template["metadata"]
        assert pod["serviceAccountName"] == "default"
        assert pod["automountServiceAccountToken"] is False
    full = parse(FULL).worker
    for template in pod_templates(all_manifests(FULL)):
        pod = template["spec"]
        assert pod["nodeSelector"] == dict(full.node_selector)
        assert template["metadata"]["annotations"] == dict(full.pod_annotations)


def test_api_gets_max_attempts_it_stamps_into_jobs() -> None:
    children = rendering.render_children(parse(FULL), OWNER_UID, replicas=1)
    api = next(m for m in children.present
               if m["kind"] == "Deployment" and m["metadata"]["name"].endswith("-api"))
    values = {e["name"]: e.get("value") for e in
              api["spec"]["template"]["spec"]["containers"][0]["env"]}
    assert values["ANTRE_MAX_ATTEMPTS"] == str(parse(FULL).worker.max_attempts) == "7"


def test_a_named_service_account_is_the_workers_alone_and_decides_its_own_token() -> None:
    """spec.worker.serviceAccountName is for the handlers (a cloud role, an API token they
    use). The reaper and the API need Redis alone: they run as default, with no token."""
    jq = parse(sample(MINIMAL, worker={"serviceAccountName": "media"},
                      api={"enabled": True, "tokenSecretRef": {"name": "tok"}}))
    templates = {m["metadata"]["labels"]["app.kubernetes.io/component"]: template
                 for m in rendering.render_children(jq, OWNER_UID, replicas=1).present
                 if m["kind"] != "Service" for template in pod_templates([m])}
    assert sorted(templates) == ["api", "reaper", "worker"]
    worker = templates.pop("worker")["spec"]
    assert worker["serviceAccountName"] == "media"
    # Not forced to true over a ServiceAccount with automountServiceAccountToken: false.
    assert "automountServiceAccountToken" not in worker
    for component, template in templates.items():
        pod = template["spec"]
        assert (pod["serviceAccountName"], pod["automountServiceAccountToken"]) == (
            "default", False), component


def test_with_tls_every_pod_refuses_a_plain_url_itself() -> None:
    """spec.redis.tls: the Secret may be edited after the operator read it, so the worker, the
    reaper and the API are told to refuse a URL without TLS (ANTRE_REDIS_TLS) themselves."""
    tls = parse(sample(MINIMAL, redis={"urlSecretRef": {"name": "redis"}, "tls": True},
                       api={"enabled": True, "tokenSecretRef": {"name": "tok"}}))
    for manifest in rendering.render_children(tls, OWNER_UID, replicas=1).present:
        if manifest["kind"] != "Service":
            assert env_of(manifest)["ANTRE_REDIS_TLS"] == {"name": "ANTRE_REDIS_TLS",
                                                           "value": "true"}, manifest["kind"]
    plain = parse(MINIMAL)
    for manifest in rendering.render_children(plain, OWNER_UID, replicas=1).present:
        if manifest["kind"] != "Service":
            assert "ANTRE_REDIS_TLS" not in env_of(manifest)


def refused(child: str, error: str, fields: list[str], id_: str) -> Any:
    """The API server's validation refusal of ``child`` (the reaper's is a CronJob)."""
    kind = "CronJob.batch" if child.endswith("-reaper") else "Deployment.apps"
    return pytest.param(f'{kind} "{child}" is invalid: {error}', fields, id=id_)


@pytest.mark.parametrize(("message", "fields"), [
    pytest.param('Deployment.apps "q-worker" is invalid: spec.template.spec.affinity.nodeAffinity'
                 '.requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms[0]'
                 '.matchExpressions[0].operator: Unsupported value: "Near"',
                 ["spec.worker.affinity"], id="affinity"),
    pytest.param('CronJob.batch "q-reaper" is invalid: [spec.jobTemplate.spec.template.spec'
                 '.tolerations[0].effect: Unsupported value: "Sometimes", spec.jobTemplate.spec'
                 '.template.metadata.annotations: Invalid value: "x/y/z"]',
                 ["spec.worker.tolerations", "spec.worker.podAnnotations"], id="two-in-a-cronjob"),
    pytest.param('Deployment.apps "q-worker" is invalid: spec.template.spec.nodeSelector: '
                 'Invalid value: "-zone"; spec.template.spec.nodeSelector[x]: again',
                 ["spec.worker.nodeSelector"], id="named-once"),
    pytest.param('Deployment.apps "q-worker" is invalid: spec.template.spec.containers[0].image:'
                 ' Required value', [], id="not-from-a-free-form-field"),
    refused("q-reaper", 'spec.schedule: Invalid value: "* * * dec-jan *": failed to parse int '
            'from dec-jan: beyond end of range', ["spec.reaper.schedule"], "cronjob-schedule"),
    refused("q-worker", 'spec.template.spec.containers[0].resources.requests: Invalid value: '
            '"2": must be less than or equal to cpu limit of 1', ["spec.worker.resources"],
            "worker-resources"),
    refused("q-worker", "spec.template.spec.containers[0].env[9].valueFrom.secretKeyRef.name: "
            'Invalid value: "Bad_Name"', ["spec.worker.env"], "worker-env"),
    refused("q-reaper", "spec.jobTemplate.spec.template.spec.containers[0].resources.requests: "
            'Invalid value: "1Gi"', ["spec.reaper.resources"], "reaper-resources"),
    refused("q-api", 'spec.template.spec.containers[0].resources.limits[cpu]: Invalid value: "-1"',
            ["spec.api.resources"], "api-resources"),
    refused("q-api", "spec.template.spec.containers[0].env[0].valueFrom.secretKeyRef.name: "
            'Invalid value: "x"', [], "api-env-is-ours"),
    pytest.param("the server could not find the requested resource", [], id="no-path"),
])
def test_a_refusal_names_the_jobqueue_fields_behind_the_childs_paths(
        message: str, fields: list[str]) -> None:
    assert rendering.spec_fields_named(message) == fields


@pytest.mark.parametrize(("message", "fields"), [
    refused("q-worker", "spec.template.spec.containers[0].env[13].valueFrom.fieldRef.fieldPath: "
            'Unsupported value: "metadata.bogus"',
            ["spec.worker.env[1].valueFrom.fieldRef.fieldPath"], "users-second-entry"),
    refused("q-worker", 'spec.template.spec.containers[0].env[12].name: Invalid value: "1A"',
            ["spec.worker.env[0].name"], "users-first-entry"),
    refused("q-worker", 'spec.template.spec.containers[0].env[3].value: Invalid value: "x"',
            ["spec.worker.env"], "one-of-the-operators-own"),
    refused("q-api", "spec.template.spec.containers[0].env[13].valueFrom.secretKeyRef.name: "
            'Invalid value: "x"', [], "api-env-is-ours"),
])
def test_a_refused_env_entry_is_named_by_the_jobqueues_own_index(
        message: str, fields: list[str]) -> None:
    """Review finding: the worker container's env holds the operator's entries first, so the
    API server's env[13] was the JobQueue's spec.worker.env[1] (here the operator has 12)."""
    assert rendering.spec_fields_named(message, worker_env_start=12) == fields


def test_the_users_env_entries_start_where_the_operator_says() -> None:
    jq = parse(FULL)
    [worker] = [m for m in rendering.render_children(jq, OWNER_UID, replicas=1).present
                if m["metadata"]["name"] == "thumbnails-worker"]
    env = worker["spec"]["template"]["spec"]["containers"][0]["env"]
    start = rendering.worker_env_start(jq)
    assert env[start:] == list(jq.worker.env) and start > 0
