"""Parsing a JobQueue spec: defaults, and errors that name the field, the value and the rule.

Aspects: defaults of a minimal spec; every section of a full spec; bad input the schema may let
through (objects not defaulted by the API server, passwords in URLs, reserved env names); env
entries checked as a container's env is, each error naming the JobQueue's own index.
"""

from __future__ import annotations

from typing import Any

import pytest
from antre import connection
from antre_operator import settings, spec
from operator_samples import FULL, MINIMAL, parse, sample


def test_minimal_defaults() -> None:
    jq = parse(MINIMAL)
    assert jq.replicas == 1
    assert jq.redis == spec.RedisSpec(url=None, url_secret=spec.SecretKeyRef("redis", "url"),
                                      queue="emails", prefix="antre", tls=False)
    assert jq.worker.image == settings.DEFAULT_WORKER_IMAGE
    assert jq.worker.concurrency == 4
    assert jq.worker.visibility_timeout_s == 60
    assert jq.worker.max_attempts == 5
    assert jq.worker.termination_grace_period_s == 120
    assert jq.worker.release_grace_s == 115
    assert jq.worker.job_timeout_s is None
    assert jq.autoscaling == spec.ScalingPolicy(
        enabled=True, min_replicas=0, max_replicas=10, target_backlog_per_replica=100,
        activation_backlog=0, polling_interval_s=5, scale_down_stabilization_s=60,
        cooldown_s=300, max_scale_up_step=None)
    assert jq.reaper.schedule == "* * * * *"
    assert not jq.api.enabled


def test_full_spec() -> None:
    jq = parse(FULL)
    assert jq.redis.queue == "thumbs" and jq.redis.prefix == "media"
    assert jq.worker.handlers == "thumbs.jobs,thumbs.more_jobs"
    assert jq.worker.backoff_base_s == 2.0 and jq.worker.backoff_max_s == 600.0
    assert jq.worker.image_pull_secrets == ["registry"]
    assert jq.autoscaling.max_scale_up_step == 4
    assert jq.api.token_secret == spec.SecretKeyRef("api-token", "token")
    assert jq.api.service_type == "LoadBalancer"


@pytest.mark.parametrize("changes, field, fragment", [
    pytest.param({"redis": None}, "spec.redis", "is required", id="no-redis"),
    pytest.param({"redis": {"url": "redis://:pw@r:6380/0"}}, "spec.redis.url",
                 "must not contain a password", id="password"),
    pytest.param({"redis": {"url": "redis://r:notaport/0"}}, "spec.redis.url", "parsable",
                 id="bad-port"),
    pytest.param({"redis": {"url": "memcached://r:11211"}}, "spec.redis.url", "scheme",
                 id="bad-scheme"),
    pytest.param({"redis": {"url": "redis:///0"}}, "spec.redis.url", "must name a host",
                 id="no-host"),
    pytest.param({"redis": {"url": "redis://r:6380", "tls": True}}, "spec.redis.url", "rediss",
                 id="tls"),
    pytest.param({"redis": {"urlSecretRef": {"key": "url"}}}, "spec.redis.urlSecretRef.name",
                 "is required", id="secret-without-name"),
    pytest.param({"autoscaling": {"minReplicas": 3, "maxReplicas": 2}},
                 "spec.autoscaling.maxReplicas", "minReplicas (3)", id="min-above-max"),
    pytest.param({"autoscaling": {"maxReplicas": "ten"}}, "spec.autoscaling.maxReplicas",
                 "must be an integer between 1 and 1000", id="not-an-integer"),
    pytest.param({"autoscaling": {"enabled": "yes"}}, "spec.autoscaling.enabled",
                 "true or false", id="not-a-bool"),
    pytest.param({"worker": {"env": [{"name": "ANTRE_QUEUE", "value": "x"}]}},
                 "spec.worker.env[0].name", "reserved", id="reserved-env"),
    pytest.param({"worker": {"env": [{"name": "POD_NAME", "value": "x"}]}},
                 "spec.worker.env[0].name", "reserved", id="reserved-pod-name"),
    pytest.param({"worker": {"imagePullPolicy": "Sometimes"}}, "spec.worker.imagePullPolicy",
                 "must be one of", id="pull-policy"),
    pytest.param({"worker": {"handlers": "my module"}}, "spec.worker.handlers", "must match",
                 id="handlers"),
    pytest.param({"reaper": {"schedule": "every minute"}}, "spec.reaper.schedule", "cron",
                 id="schedule"),
    pytest.param({"reaper": {"schedule": "* * * dec-jan *"}}, "spec.reaper.schedule",
                 "a range a-b needs a <= b (names count as numbers", id="schedule-month-names"),
    pytest.param({"reaper": {"schedule": "* * * * sat-mon"}}, "spec.reaper.schedule",
                 "a range a-b needs a <= b (names count as numbers", id="schedule-day-names"),
    pytest.param({"reaper": {"schedule": "*/99999999999999999999 * * * *"}},
                 "spec.reaper.schedule", "steps (/n, n a whole number from 1, at most 18 digits)",
                 id="schedule-huge-step"),
    pytest.param({"reaper": {"schedule": "* * * * */0"}}, "spec.reaper.schedule",
                 "steps (/n, n a whole number from 1", id="schedule-step-zero"),
    pytest.param({"api": {"enabled": True}}, "spec.api.tokenSecretRef", "bearer token",
                 id="api-token"),
    pytest.param({"api": {"dashboard": {"readOnly": "yes"}}}, "spec.api.dashboard.readOnly",
                 "true or false", id="dashboard-read-only"),
    pytest.param({"api": {"dashboard": True}}, "spec.api.dashboard", "must be an object",
                 id="dashboard-section"),
    pytest.param({"api": {"dashboard": {"trustedProxies": ["10.0.0.0/8", "ingress"]}}},
                 "spec.api.dashboard.trustedProxies[1]", "an IP address or a CIDR range",
                 id="dashboard-trusted-proxy"),
    pytest.param({"api": {"dashboard": {"trustedProxies": "10.0.0.0/8"}}},
                 "spec.api.dashboard.trustedProxies", "must be a list",
                 id="dashboard-trusted-proxies-list"),
    pytest.param({"worker": {"backoff": {"baseSeconds": 0}}}, "spec.worker.backoff.baseSeconds",
                 "> 0", id="backoff-base-zero"),
    pytest.param({"worker": "big"}, "spec.worker", "must be an object", id="section-type"),
])
def test_invalid_specs(changes: dict[str, Any], field: str, fragment: str) -> None:
    with pytest.raises(spec.InvalidSpec) as info:
        parse(sample(MINIMAL, **changes))
    assert info.value.field == field
    assert fragment in str(info.value)
    assert str(info.value).startswith(f"{field}: got ")


@pytest.mark.parametrize("url, fragment", [
    ("redis://user:hunter2@r:6380/0", "must not contain a password or user info"),
    ("redis://:hun/ter2@r:6380/0", "must not contain a password or user info"),
    ("redis://r:6380/0?password=hunter2", "password or username query parameter"),
    ("redis://r:6380/0?db=1&USERNAME=hunter2", "password or username query parameter"),
    ("redis://hunter2:notaport/0", "parsable"),
    ("memcached://hunter2:11211", "scheme"),
])
def test_password_never_appears_in_the_error(url: str, fragment: str) -> None:
    with pytest.raises(spec.InvalidSpec) as info:
        parse(sample(MINIMAL, redis={"url": url}))
    assert "hunter2" not in str(info.value)
    assert fragment in str(info.value)
    assert "<redacted>" in str(info.value)


def test_a_url_from_a_secret_may_carry_credentials_but_errors_never_show_it() -> None:
    spec.check_redis_url("redis://r:6380/0?password=hunter2", field="url", tls=False)
    spec.check_redis_url("redis://:hunter2@r:6380/0", field="url", tls=False)
    with pytest.raises(spec.InvalidSpec) as info:
        spec.check_redis_url("redis://:hun/ter2@r:6380/0", field="url", tls=False)
    assert "hunter2" not in str(info.value) and "hun/ter2" not in str(info.value)


@pytest.mark.parametrize("url", [
    "redis://user:p@ss/w0rd@redis:6379",  # read as host 'ss' and path 'w0rd@redis:6379'
    "redis://user:p@ss?w0rd@redis:6379",
    "redis://user:p@ss#w0rd@redis:6379",
])
def test_a_password_that_ends_the_host_early_is_refused_without_naming_that_host(url: str) -> None:
    with pytest.raises(spec.InvalidSpec) as info:
        spec.check_redis_url(url, field="url", tls=False)
    message = str(info.value)
    assert "percent-encoded" in message
    assert "'ss'" not in message and "w0rd" not in message


def test_the_tls_key_passphrase_is_a_secret_query_parameter() -> None:
    with pytest.raises(spec.InvalidSpec, match="password or username query parameter"):
        spec.check_plain_url("rediss://r:6380/0?ssl_password=hunter2", field="spec.redis.url")
    assert "hunter2" not in connection.redact("rediss://r:6380/0?ssl_password=hunter2")


def test_an_explicit_null_means_the_default() -> None:
    """The API server prunes nulls, but an object stored before a CRD upgrade may carry them."""
    jq = parse(sample(MINIMAL, redis={"url": "redis://redis:6379/0", "queue": None,
                                      "prefix": None, "tls": None}))
    assert jq.redis.queue == parse(MINIMAL).redis.queue and jq.redis.prefix == "antre"


def test_both_urls_given_names_the_fields_never_the_url() -> None:
    with pytest.raises(spec.InvalidSpec) as info:
        parse(sample(MINIMAL, redis={"url": "redis://:hunter2@r:6379/0",
                                     "urlSecretRef": {"name": "s"}}))
    assert "hunter2" not in str(info.value) and "urlSecretRef" in str(info.value)


def env(*items: dict[str, Any]) -> dict[str, Any]:
    return {"worker": {"env": list(items)}}


SECRET_KEY = {"secretKeyRef": {"name": "s3", "key": "key"}}


@pytest.mark.parametrize("item, field, value, fragment", [
    # Review finding: passed the CRD, and ended as ApplyFailed naming env[12], an index that
    # counted the operator's own entries, without the entry's value.
    pytest.param({"name": "FROM_SECRET", "valueFrom": {"secretKeyRef": {"name": "redis-url"}}},
                 "spec.worker.env[1].valueFrom.secretKeyRef.key", None,
                 "is required: secretKeyRef needs name and key", id="secret-without-key"),
    pytest.param({"name": "C", "valueFrom": {"configMapKeyRef": {"key": "k"}}},
                 "spec.worker.env[1].valueFrom.configMapKeyRef.name", None,
                 "configMapKeyRef needs name and key", id="config-map-without-name"),
    pytest.param({"name": "S", "valueFrom": {"secretKeyRef": {"name": "Bad_Name", "key": "k"}}},
                 "spec.worker.env[1].valueFrom.secretKeyRef.name", "Bad_Name",
                 "must be the name of a Secret", id="secret-name"),
    pytest.param({"name": "S", "valueFrom": {"secretKeyRef": {"name": "s", "key": "a/b"}}},
                 "spec.worker.env[1].valueFrom.secretKeyRef.key", "a/b", "must match",
                 id="secret-key"),
    pytest.param({"name": "S", "valueFrom": {"secretKeyRef": {"name": "s", "key": "k",
                                                              "optional": "yes"}}},
                 "spec.worker.env[1].valueFrom.secretKeyRef.optional", "yes", "true or false",
                 id="optional-not-a-bool"),
    pytest.param({"name": "S", "valueFrom": {"secretKeyRef": {"name": "s", "key": "k",
                                                              "keys": "x"}}},
                 "spec.worker.env[1].valueFrom.secretKeyRef", ["keys"],
                 "takes only name, key, optional", id="unknown-ref-field"),
    pytest.param({"name": "F", "valueFrom": {"fieldRef": {"apiVersion": "v1"}}},
                 "spec.worker.env[1].valueFrom.fieldRef.fieldPath", None,
                 "fieldRef needs fieldPath", id="field-ref-without-path"),
    pytest.param({"name": "R", "valueFrom": {"resourceFieldRef": {"divisor": "1Mi"}}},
                 "spec.worker.env[1].valueFrom.resourceFieldRef.resource", None,
                 "resourceFieldRef needs resource", id="resource-ref-without-resource"),
    pytest.param({"name": "R", "valueFrom": {"resourceFieldRef": {"resource": "limits.memory",
                                                                  "divisor": True}}},
                 "spec.worker.env[1].valueFrom.resourceFieldRef.divisor", True,
                 "must be a quantity", id="divisor"),
    pytest.param({"name": "X", "valueFrom": {}}, "spec.worker.env[1].valueFrom", [],
                 "give exactly one of ['secretKeyRef', 'configMapKeyRef', 'fieldRef', "
                 "'resourceFieldRef']", id="no-source"),
    pytest.param({"name": "X", "valueFrom": {"secretKeyref": {"name": "s", "key": "k"}}},
                 "spec.worker.env[1].valueFrom", ["secretKeyref"], "give exactly one of",
                 id="misspelt-source"),
    pytest.param({"name": "X", "valueFrom": {**SECRET_KEY, "fieldRef": {"fieldPath": "x"}}},
                 "spec.worker.env[1].valueFrom", ["secretKeyRef", "fieldRef"],
                 "give exactly one of", id="two-sources"),
    pytest.param({"name": "X", "valueFrom": "s3"}, "spec.worker.env[1].valueFrom", "s3",
                 "must be an object with one of", id="source-not-an-object"),
    pytest.param({"name": "X", "value": "1", "valueFrom": SECRET_KEY}, "spec.worker.env[1]",
                 ["value", "valueFrom"], "give one of value and valueFrom, not both",
                 id="value-and-value-from"),
    pytest.param({"name": "X", "value": 8080}, "spec.worker.env[1].value", 8080,
                 "must be a string", id="value-not-a-string"),
    pytest.param({"name": "X", "vaule": "1"}, "spec.worker.env[1]", ["vaule"],
                 "takes only name, value and valueFrom", id="unknown-field"),
    pytest.param({"value": "1"}, "spec.worker.env[1].name", None, "must be a non-empty string",
                 id="no-name"),
    pytest.param({"name": "A=B", "value": "1"}, "spec.worker.env[1].name", "A=B",
                 "printable ASCII characters but '='", id="name-with-equals"),
    pytest.param({"name": "A\nB", "value": "1"}, "spec.worker.env[1].name", "A\nB",
                 "printable ASCII", id="name-with-newline"),
    pytest.param({"name": "ANTRE_CONCURRENCY", "value": "9"}, "spec.worker.env[1].name",
                 "ANTRE_CONCURRENCY", "reserved", id="reserved"),
])
def test_a_bad_env_entry_names_its_own_index_the_value_and_what_is_allowed(
        item: dict[str, Any], field: str, value: Any, fragment: str) -> None:
    with pytest.raises(spec.InvalidSpec) as info:
        parse(sample(MINIMAL, **env({"name": "FIRST", "value": "ok"}, item)))
    assert (info.value.field, info.value.value) == (field, value)
    assert fragment in str(info.value), str(info.value)
    assert str(info.value).startswith(f"{field}: got {value!r}; ")
    assert "\n" not in str(info.value)  # one line


def test_an_env_value_is_never_shown_in_an_error() -> None:
    """An env value may be a secret written in the clear: structural errors name the fields."""
    with pytest.raises(spec.InvalidSpec) as info:
        parse(sample(MINIMAL, **env({"name": "X", "value": "hunter2", "valueFrom": SECRET_KEY})))
    assert "hunter2" not in str(info.value)


@pytest.mark.parametrize("item", [
    {"name": "PLAIN", "value": "1"},
    {"name": "EMPTY", "value": ""},
    {"name": "EMPTY_TOO"},  # a Pod takes a name alone as an empty variable
    {"name": "my.var-1 with spaces", "value": "x"},
    {"name": "S", "valueFrom": {"secretKeyRef": {"name": "s3", "key": "key.json",
                                                 "optional": True}}},
    {"name": "C", "valueFrom": {"configMapKeyRef": {"name": "settings", "key": "level"}}},
    {"name": "NODE", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName",
                                                "apiVersion": "v1"}}},
    {"name": "MEM", "valueFrom": {"resourceFieldRef": {"resource": "limits.memory",
                                                       "containerName": "worker",
                                                       "divisor": "1Mi"}}},
    {"name": "CPU", "valueFrom": {"resourceFieldRef": {"resource": "requests.cpu",
                                                       "divisor": 1}}},
])
def test_env_entries_as_a_container_takes_them(item: dict[str, Any]) -> None:
    assert list(parse(sample(MINIMAL, **env(item))).worker.env) == [item]
