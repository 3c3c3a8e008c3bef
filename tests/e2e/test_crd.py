"""The JobQueue CRD on a real API server: ``kubectl apply -f crds/`` and JobQueues applied by hand.

Aspects covered:
* the CRD is accepted (a structural schema, CEL rules within the cost budget, valid defaults) and
  Established; applying it again changes nothing; ``kubectl explain`` documents the spec;
* the examples and other valid JobQueues are accepted; the defaults the server stores are the
  ones the operator assumes (parsing the stored object gives what parsing the bare one gives);
* invalid JobQueues are refused by the API server itself, with the field named and the CRD's
  message, and the operator's own parser refuses them too;
* every reaper schedule the CRD admits is one the CronJob API admits (and the other way round for
  the cases tried): a schedule the CronJob would refuse never gets past the JobQueue;
* the API server's refusals of children rendered from free-form fields (resources), of what
  the CRD leaves to it in env entries (which fieldPath, which resource) and of a CronJob
  schedule name the JobQueue field behind them (what ApplyFailed quotes), an env entry by the
  JobQueue's own index.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from antre_operator import rendering
from antre_operator import spec as jobqueue_spec
from redis_servers import wait_until

from .cluster import Cluster
from .samples import example, jobqueue


def dry_run_create(cluster: Cluster, body: dict[str, Any], namespace: str,
                   ) -> tuple[bool, str, dict[str, Any] | None]:
    """Create with ``dryRun=All``: full admission (strict fields, as kubectl's default),
    nothing stored. Returns (accepted, the server's message, the object as it would be)."""
    group_version = body["apiVersion"]
    prefix = "/api/v1" if group_version == "v1" else f"/apis/{group_version}"
    plural = {"JobQueue": "jobqueues", "CronJob": "cronjobs",
              "Deployment": "deployments"}[body["kind"]]
    status, answer = cluster.request(
        "POST", f"{prefix}/namespaces/{namespace}/{plural}", body,
        query={"dryRun": "All", "fieldValidation": "Strict"})
    accepted = status < 300
    return accepted, "" if accepted else str(answer.get("message")), answer if accepted else None


def parse(body: dict[str, Any], namespace: str) -> jobqueue_spec.JobQueueSpec:
    return jobqueue_spec.parse_jobqueue(name=body["metadata"]["name"], namespace=namespace,
                                        spec=body["spec"])


def test_crd_is_established_and_reapplies_unchanged(cluster: Cluster, crds: None) -> None:
    crd = cluster.get("crd", "jobqueues.antre.dev")
    assert crd is not None
    conditions = {c["type"]: c["status"] for c in crd["status"]["conditions"]}
    assert conditions.get("Established") == "True"
    assert conditions.get("NonStructuralSchema") is None
    again = cluster.kubectl("apply", "-f", "crds/").stdout
    assert "unchanged" in again, again


def test_kubectl_explain_documents_the_spec(cluster: Cluster, crds: None) -> None:
    # The server publishes a new CRD's OpenAPI document a moment after it is Established.
    def explain() -> str | None:
        result = cluster.kubectl("explain", "jobqueue.spec", check=False)
        return result.stdout if result.returncode == 0 else None

    spec_doc = str(wait_until(explain, timeout_s=30, interval_s=0.5,
                              message="kubectl explain jobqueue.spec"))
    for field in ("redis", "worker", "autoscaling", "reaper", "api", "replicas"):
        assert f"{field}\t" in spec_doc, spec_doc
    field_doc = cluster.kubectl("explain", "jq.spec.autoscaling.targetBacklogPerReplica").stdout
    assert "ceil(backlog / targetBacklogPerReplica)" in field_doc


@pytest.mark.parametrize("name", ["jobqueue", "jobqueue-fixed"])
def test_examples_are_accepted(cluster: Cluster, crds: None, namespace: str, name: str) -> None:
    result = cluster.kubectl("apply", "--dry-run=server", "-o", "json", "-n", namespace,
                             "-f", f"examples/{name}.yaml")
    stored = json.loads(result.stdout)
    assert parse(stored, namespace) == parse(example(name), namespace)


def test_kubectl_apply_of_a_bad_jobqueue_names_the_field(cluster: Cluster, crds: None,
                                                          namespace: str) -> None:
    body = jobqueue(autoscaling={"minReplicas": 5, "maxReplicas": 2}, bogus=True)
    result = cluster.apply(body, namespace=namespace, check=False)
    assert result.returncode != 0
    assert 'unknown field "spec.bogus"' in result.stderr, result.stderr
    del body["spec"]["bogus"]
    result = cluster.apply(body, namespace=namespace, check=False)
    assert result.returncode != 0
    assert ("spec.autoscaling.minReplicas: Invalid value" in result.stderr
            and "must be <= spec.autoscaling.maxReplicas" in result.stderr), result.stderr
    assert cluster.get("jobqueue", "emails", namespace) is None


def test_defaults_appear_on_the_stored_object(cluster: Cluster, crds: None,
                                              namespace: str) -> None:
    body = jobqueue()
    cluster.apply(body, namespace=namespace)
    stored = cluster.get("jobqueue", "emails", namespace)
    assert stored is not None
    spec = stored["spec"]
    assert spec["replicas"] == 1
    assert spec["redis"] == {"urlSecretRef": {"name": "redis-url", "key": "url"},
                             "prefix": "antre", "tls": False}
    assert spec["autoscaling"] == {
        "enabled": True, "minReplicas": 0, "maxReplicas": 10, "targetBacklogPerReplica": 100,
        "activationBacklog": 0, "pollingIntervalSeconds": 5,
        "scaleDownStabilizationSeconds": 60, "cooldownSeconds": 300}
    assert spec["worker"]["backoff"] == {"baseSeconds": 1, "maxSeconds": 300}
    assert spec["reaper"] == {"schedule": "* * * * *", "suspend": False}
    assert spec["api"]["enabled"] is False
    # The operator reads a bare spec (an object stored before a CRD upgrade added a default)
    # exactly as the defaulted one.
    assert parse(stored, namespace) == parse(body, namespace)


GOOD = [
    pytest.param({"redis": {"url": "redis://redis.antre:6380/0"}}, id="plain-url"),
    pytest.param({"redis": {"url": "rediss://redis:6380/0?ssl_cert_reqs=none", "tls": True}},
                 id="tls-url-with-options"),
    pytest.param({"redis": {"url": "rediss+cluster://redis:6380/0", "tls": True}},
                 id="tls-cluster-url"),
    pytest.param({"redis": {"url": "redis+sentinel://s1:26379,s2:26379,s3/mymaster/0",
                            "durableReplicas": 1, "durableTimeoutSeconds": 0.5}},
                 id="sentinel-url-durable"),
    pytest.param({"redis": {"url": "rediss+sentinel://s1,s2/mymaster", "tls": True}},
                 id="tls-sentinel-url"),
    pytest.param({"autoscaling": {"enabled": False, "minReplicas": 5, "maxReplicas": 1},
                  "replicas": 3}, id="fixed-replicas-ignores-range"),
    pytest.param({"autoscaling": {"minReplicas": 0, "maxReplicas": 1}}, id="scale-to-zero"),
    pytest.param({"worker": {"resources": {"requests": {"cpu": 1, "memory": "1Gi"}},
                             "env": [{"name": "A", "value": "1"}],
                             "tolerations": [{"key": "k", "operator": "Exists"}],
                             "podAnnotations": {"team": "media"}}}, id="worker-extras"),
    pytest.param({"api": {"enabled": True, "tokenSecretRef": {"name": "t"}}}, id="api"),
    pytest.param({"worker": {"env": [
        {"name": "EMPTY", "value": ""},
        {"name": "EMPTY_TOO"},  # a name alone: an empty variable, as in a Pod
        {"name": "S", "valueFrom": {"secretKeyRef": {"name": "s3", "key": "k", "optional": True}}},
        {"name": "C", "valueFrom": {"configMapKeyRef": {"name": "settings", "key": "level"}}},
        {"name": "NODE", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}},
        {"name": "MEM", "valueFrom": {"resourceFieldRef": {"resource": "limits.memory",
                                                           "divisor": "1Mi"}}},
        {"name": "CPU", "valueFrom": {"resourceFieldRef": {"resource": "requests.cpu",
                                                           "divisor": 1}}}]}}, id="env-sources"),
]


@pytest.mark.parametrize("changes", GOOD)
def test_valid_jobqueues_are_accepted(cluster: Cluster, crds: None, module_namespace: str,
                                      changes: dict[str, Any]) -> None:
    body = jobqueue(**changes)
    accepted, error, stored = dry_run_create(cluster, body, module_namespace)
    assert accepted, error
    assert stored is not None
    parse(stored, module_namespace)  # the operator accepts what the API server accepts


#: Unknown fields never reach the operator's parser (the server refuses or prunes them).
UNKNOWN_FIELDS = [
    pytest.param({"bogus": 1}, "spec.bogus", id="unknown-field"),
    pytest.param({"worker": {"concurrenc": 4}}, "spec.worker.concurrenc", id="misspelt-field"),
    pytest.param({"redis": {"urlSecretRef": {"name": "r", "keys": "url"}}},
                 "spec.redis.urlSecretRef.keys", id="misspelt-nested-field"),
]


@pytest.mark.parametrize("changes, field", UNKNOWN_FIELDS)
def test_unknown_fields_are_refused_by_the_api_server(
        cluster: Cluster, crds: None, module_namespace: str, changes: dict[str, Any], field: str) -> None:
    accepted, error, _ = dry_run_create(cluster, jobqueue(**changes), module_namespace)
    assert not accepted
    assert f'unknown field "{field}"' in error, error


BAD = [
    pytest.param({"redis": None}, "spec.redis", "Required value", id="no-redis"),
    pytest.param({"worker": {"concurrency": 0}}, "spec.worker.concurrency",
                 "should be greater than or equal to 1", id="concurrency-zero"),
    pytest.param({"autoscaling": {"maxReplicas": 1001}}, "spec.autoscaling.maxReplicas",
                 "should be less than or equal to 1000", id="max-too-high"),
    pytest.param({"replicas": -1}, "spec.replicas", "should be greater than or equal to 0",
                 id="negative-replicas"),
    pytest.param({"api": {"serviceType": "ExternalName"}}, "spec.api.serviceType",
                 "Unsupported value", id="bad-service-type"),
    pytest.param({"redis": {"url": "http://redis:6380"}}, "spec.redis.url",
                 "should match", id="wrong-scheme"),
    pytest.param({"autoscaling": {"minReplicas": 5, "maxReplicas": 2}},
                 "spec.autoscaling.minReplicas",
                 "spec.autoscaling.minReplicas must be <= spec.autoscaling.maxReplicas",
                 id="min-above-max"),
    pytest.param({"redis": {"url": "redis://:hunter2@redis:6380/0"}}, "spec.redis.url",
                 "spec.redis.url must not contain a password", id="password-in-url"),
    pytest.param({"redis": {"url": "redis://user@redis:6380/0"}}, "spec.redis.url",
                 "spec.redis.url must not contain a password", id="user-info"),
    pytest.param({"redis": {"url": "redis://redis:6380/0?password=s3cret"}}, "spec.redis.url",
                 "must not contain a password or username query parameter", id="password-query"),
    pytest.param({"redis": {"url": "redis://r:6380", "urlSecretRef": {"name": "s"}}},
                 "spec.redis", "give exactly one of spec.redis.url and spec.redis.urlSecretRef",
                 id="both-urls"),
    pytest.param({"redis": {"queue": "q"}}, "spec.redis",
                 "give exactly one of spec.redis.url and spec.redis.urlSecretRef", id="no-url"),
    pytest.param({"redis": {"url": "redis://r:6380", "tls": True}}, "spec.redis.tls",
                 "spec.redis.tls requires a rediss://, rediss+sentinel:// or rediss+cluster:// URL",
                 id="tls-without-rediss"),
    # redis-py decodes the option names of a URL's query, so these are passwords to it too.
    pytest.param({"redis": {"url": "redis://redis:6380/0?pass%77ord=s3cret"}}, "spec.redis.url",
                 "must not percent-encode the name of a query parameter",
                 id="percent-encoded-password-query"),
    pytest.param({"redis": {"url": "redis+sentinel://s1/m?sentinel%5Fpassword=s3cret"}},
                 "spec.redis.url", "must not percent-encode the name of a query parameter",
                 id="percent-encoded-sentinel-password-query"),
    pytest.param({"redis": {"url": "redis+sentinel://s1/m?sentinel_password=s3cret"}},
                 "spec.redis.url", "must not contain a password or username query parameter",
                 id="sentinel-password-query"),
    pytest.param({"redis": {"url": "rediss://r:6380/0?ssl_password=s3cret", "tls": True}},
                 "spec.redis.url", "must not contain a password or username query parameter",
                 id="tls-key-passphrase-query"),
    pytest.param({"redis": {"url": "redis+cluster://r:6380", "durableReplicas": 1}},
                 "spec.redis.durableReplicas", "must be 0 with a Redis Cluster URL",
                 id="durable-on-cluster"),
    pytest.param({"api": {"enabled": True}}, "spec.api.tokenSecretRef",
                 "spec.api.tokenSecretRef is required", id="api-without-token"),
    pytest.param({"worker": {"backoff": {"baseSeconds": 10, "maxSeconds": 5}}},
                 "spec.worker.backoff.baseSeconds",
                 "spec.worker.backoff.baseSeconds must be <= spec.worker.backoff.maxSeconds",
                 id="backoff-inverted"),
    pytest.param({"worker": {"backoff": {"baseSeconds": 0}}}, "spec.worker.backoff.baseSeconds",
                 "should be greater than 0", id="backoff-base-zero"),
    pytest.param({"reaper": {"schedule": "every minute"}}, "spec.reaper.schedule",
                 "should match", id="cron-words"),
    pytest.param({"reaper": {"schedule": "61 * * * *"}}, "spec.reaper.schedule",
                 "the minute field takes 0-59", id="cron-minute-61"),
    pytest.param({"reaper": {"schedule": "0 9-5 * * *"}}, "spec.reaper.schedule",
                 "a range a-b needs a <= b", id="cron-reversed-range"),
    # Review finding: env entries were free-form, so this one reached the worker Deployment and
    # its refusal named env[12], an index counting the operator's own entries.
    pytest.param({"worker": {"env": [{"name": "FROM_SECRET",
                                      "valueFrom": {"secretKeyRef": {"name": "redis-url"}}}]}},
                 "spec.worker.env[0].valueFrom.secretKeyRef.key", "Required value",
                 id="env-secret-without-key"),
    pytest.param({"worker": {"env": [{"name": "B", "value": "1",
                                      "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}}]}},
                 "spec.worker.env[0]", "give one of value and valueFrom, not both",
                 id="env-value-and-value-from"),
    pytest.param({"worker": {"env": [{"name": "B", "valueFrom": {
        "fieldRef": {"fieldPath": "spec.nodeName"},
        "secretKeyRef": {"name": "s", "key": "k"}}}]}},
                 "spec.worker.env[0].valueFrom", "give exactly one of secretKeyRef",
                 id="env-two-sources"),
    pytest.param({"worker": {"env": [{"name": "R", "valueFrom": {"resourceFieldRef": {}}}]}},
                 "spec.worker.env[0].valueFrom.resourceFieldRef.resource", "Required value",
                 id="env-resource-without-resource"),
    pytest.param({"worker": {"env": [{"name": "ANTRE_CONCURRENCY", "value": "9"}]}},
                 "spec.worker.env[0].name", "are set by the operator", id="env-reserved-name"),
    pytest.param({"worker": {"env": [{"name": "A=B", "value": "1"}]}},
                 "spec.worker.env[0].name", "should match", id="env-name-with-equals"),
]


@pytest.mark.parametrize("changes, field, message", BAD)
def test_invalid_jobqueues_are_refused_by_the_api_server(
        cluster: Cluster, crds: None, module_namespace: str, changes: dict[str, Any], field: str,
        message: str) -> None:
    body = jobqueue(**changes)
    accepted, error, _ = dry_run_create(cluster, body, module_namespace)
    assert not accepted
    assert field in error and message in error, error
    with pytest.raises(jobqueue_spec.InvalidSpec):  # and the operator, as a second line
        parse(body, module_namespace)


def test_too_long_names_are_refused(cluster: Cluster, crds: None, module_namespace: str) -> None:
    accepted, error, _ = dry_run_create(cluster, jobqueue("x" * 46), module_namespace)
    assert not accepted
    assert "metadata.name must be at most 45 characters" in error, error


@pytest.mark.parametrize("name", ["my.queue", "1queue"])
def test_a_name_its_api_service_could_not_carry_is_refused_with_the_api_on(
        cluster: Cluster, crds: None, module_namespace: str, name: str) -> None:
    """A JobQueue's name may hold a dot or start with a digit; its API's Service may not."""
    accepted, _, _ = dry_run_create(cluster, jobqueue(name), module_namespace)
    assert accepted
    api = {"enabled": True, "tokenSecretRef": {"name": "api-token"}}
    accepted, error, _ = dry_run_create(cluster, jobqueue(name, api=api), module_namespace)
    assert not accepted
    assert "metadata.name must start with a letter" in error, error
    with pytest.raises(jobqueue_spec.InvalidSpec, match="start with a letter"):
        rendering.check_name(parse(jobqueue(name, api=api), module_namespace))


ADMITTED_SCHEDULES = ["@hourly", "@daily", "@yearly", "@midnight", "* * * * *",
                      "*/5 1-3 * * MON-FRI", "0 3 * JAN,jul sun", "*  * * * *", "0 3 * * * ",
                      " 0 3 * * *", "0\t3 * *  *", "5/15 * ? * ?", "0 0 1-31/2 1-12 0-6",
                      "05 03 01 01 00", "* * * jan-3 *", "* * * * sun-sat", "*/59 */23 */31 */12 */7",
                      # A step beyond the field's span fires once per span (a review found the
                      # CRD had been made to refuse these, which the CronJob API takes).
                      "*/60 * * * *", "0 */24 * * *", "0 0 */32 * *", "0 0 1 */13 *",
                      "0 0 * * */8", "*/999999999999999999 * * * *"]
#: Refused by the CronJob API too: the CRD must not let them through to the operator.
INVALID_SCHEDULES = ["@reboot", "* * * *", "* * * * * *", "every minute", "60 * * * *",
                     "* 24 * * *", "* * 0 * *", "* * 32 * *", "* * * 13 *", "* * * * 7",
                     "*/0 * * * *", "* * * FOO *", "TZ=UTC * * * * *",
                     "- * * * *", "30-10 * * * *", "* * * * 5-1", "* * * dec-jan *",
                     "* * * * sat-mon", "* * * NOV-mar *", "*/99999999999999999999 * * * *"]
#: Accepted by the CronJob API but not by the CRD: macros with spaces or arguments, empty
#: list items, a step of 19 digits (an int64 holds some of them; the CRD stops at 18).
STRICTER_SCHEDULES = ["@every 1m", "@midnight *", " @daily", "@daily ", "1,,2 * * * *",
                      "*/1000000000000000000 * * * *"]


def cronjob(schedule: str) -> dict[str, Any]:
    return {"apiVersion": "batch/v1", "kind": "CronJob", "metadata": {"name": "probe"},
            "spec": {"schedule": schedule, "jobTemplate": {"spec": {"template": {"spec": {
                "restartPolicy": "Never",
                "containers": [{"name": "c", "image": "busybox"}]}}}}}}


@pytest.mark.parametrize("schedule", ADMITTED_SCHEDULES)
def test_schedules_the_crd_admits_the_cronjob_api_admits(
        cluster: Cluster, crds: None, module_namespace: str, schedule: str) -> None:
    accepted, error, _ = dry_run_create(cluster, jobqueue(reaper={"schedule": schedule}),
                                        module_namespace)
    assert accepted, error
    accepted, error, _ = dry_run_create(cluster, cronjob(schedule), module_namespace)
    assert accepted, error
    assert parse(jobqueue(reaper={"schedule": schedule}), module_namespace).reaper.schedule == schedule


@pytest.mark.parametrize("schedule", [
    *(pytest.param(s, id=f"invalid:{s}") for s in INVALID_SCHEDULES),
    *(pytest.param(s, id=f"stricter:{s}") for s in STRICTER_SCHEDULES)])
def test_schedules_the_crd_refuses(cluster: Cluster, crds: None, module_namespace: str,
                                   schedule: str) -> None:
    accepted, error, _ = dry_run_create(cluster, jobqueue(reaper={"schedule": schedule}),
                                        module_namespace)
    assert not accepted
    assert "spec.reaper.schedule" in error, error
    with pytest.raises(jobqueue_spec.InvalidSpec, match=r"spec\.reaper\.schedule"):
        parse(jobqueue(reaper={"schedule": schedule}), module_namespace)
    if schedule in INVALID_SCHEDULES:
        cron_accepted, _, _ = dry_run_create(cluster, cronjob(schedule), module_namespace)
        assert not cron_accepted, "the CronJob API takes it: the CRD need not refuse it"


def test_a_refused_child_names_the_jobqueue_field_behind_it(
        cluster: Cluster, crds: None, module_namespace: str) -> None:
    """The API server's own refusals of children rendered from free-form JobQueue fields (the
    CRD and the parser leave resources, and which pod field an env entry reads, to it), and of
    a CronJob schedule: ApplyFailed names the JobQueue field behind each."""
    api = {"enabled": True, "tokenSecretRef": {"name": "api-token"},
           "resources": {"requests": {"memory": "1Gi"}, "limits": {"memory": "1Mi"}}}
    body = jobqueue(
        api=api, reaper={"resources": {"requests": {"cpu": "2"}, "limits": {"cpu": "1"}}},
        worker={"handlers": "antre.example_handlers",
                "resources": {"requests": {"cpu": "2"}, "limits": {"cpu": "1"}},
                "env": [{"name": "A", "value": "1"}, {"name": "WHERE", "valueFrom": {
                    "fieldRef": {"fieldPath": "metadata.bogus"}}}]})
    jq = parse(body, module_namespace)
    children = rendering.render_children(jq, "uid", replicas=1)
    named = {}
    for manifest in children.present:
        if manifest["kind"] == "Service":
            continue
        accepted, error, _ = dry_run_create(cluster, manifest, module_namespace)
        assert not accepted, manifest["metadata"]["name"]
        named[manifest["metadata"]["name"]] = rendering.spec_fields_named(
            error, worker_env_start=rendering.worker_env_start(jq))
    # The worker's env holds the operator's entries first: the JobQueue's own index is named.
    assert named == {"emails-worker": ["spec.worker.env[1].valueFrom.fieldRef.fieldPath",
                                       "spec.worker.resources"],
                     "emails-reaper": ["spec.reaper.resources"],
                     "emails-api": ["spec.api.resources"]}, named

    reaper = next(m for m in children.present if m["kind"] == "CronJob")
    reaper["spec"]["schedule"] = "* * * dec-jan *"  # as a JobQueue admitted before this check
    reaper["spec"]["jobTemplate"]["spec"]["template"]["spec"]["containers"][0]["resources"] = {}
    accepted, error, _ = dry_run_create(cluster, reaper, module_namespace)
    assert not accepted
    assert rendering.spec_fields_named(error) == ["spec.reaper.schedule"], error
