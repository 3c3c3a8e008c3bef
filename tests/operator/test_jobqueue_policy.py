"""What a JobQueue may ask for: object names that are names, pod annotations that keep the
restricted profile, and the operator's policy (``policy.py``).

Aspects: every object name in the spec (the Redis URL Secret, the API token Secret, the
ServiceAccount, image pull Secrets) must be a Kubernetes object name, so none can be a path
("../../kube-system/secrets/admin-creds"); the operator's pattern is the CRD's. AppArmor and
seccomp annotations are refused, by the CRD's rule and the operator. The policy refuses the
operator's own namespace and ServiceAccount, images outside the allowed registries (whole path
segments, Docker Hub's implicit names spelled out), ServiceAccounts outside the allow-list, and
Redis hosts outside theirs (every Sentinel of a Sentinel URL); errors never show a URL.
"""

from __future__ import annotations

import re
from typing import Any

import pytest
from antre_operator import policy, settings, spec
from operator_samples import MINIMAL, parse, sample

TRAVERSAL = "../../kube-system/secrets/admin-creds"


@pytest.mark.parametrize("changes, field", [
    pytest.param({"redis": {"urlSecretRef": {"name": TRAVERSAL}}}, "spec.redis.urlSecretRef.name",
                 id="url-secret"),
    pytest.param({"redis": {"urlSecretRef": {"name": "a/b"}}}, "spec.redis.urlSecretRef.name",
                 id="url-secret-slash"),
    pytest.param({"redis": {"urlSecretRef": {"name": ".."}}}, "spec.redis.urlSecretRef.name",
                 id="url-secret-dot-dot"),
    pytest.param({"redis": {"urlSecretRef": {"name": "redis-url\n"}}},
                 "spec.redis.urlSecretRef.name", id="url-secret-newline"),
    pytest.param({"redis": {"urlSecretRef": {"name": "x" * 254}}}, "spec.redis.urlSecretRef.name",
                 id="url-secret-too-long"),
    pytest.param({"redis": {"urlSecretRef": {"name": "redis", "key": "../url"}}},
                 "spec.redis.urlSecretRef.key", id="url-secret-key"),
    pytest.param({"api": {"enabled": True, "tokenSecretRef": {"name": TRAVERSAL}}},
                 "spec.api.tokenSecretRef.name", id="token-secret"),
    pytest.param({"worker": {"serviceAccountName": "../default"}},
                 "spec.worker.serviceAccountName", id="service-account"),
    pytest.param({"worker": {"imagePullSecrets": [{"name": TRAVERSAL}]}},
                 "spec.worker.imagePullSecrets[0].name", id="pull-secret"),
])
def test_object_names_are_names_not_paths(changes: dict[str, Any], field: str) -> None:
    with pytest.raises(spec.InvalidSpec) as info:
        parse(sample(MINIMAL, **changes))
    assert info.value.field == field


def test_the_crd_has_the_operators_name_patterns(crd_schema: dict[str, Any]) -> None:
    properties = crd_schema["properties"]["spec"]["properties"]
    worker = properties["worker"]["properties"]
    names = [properties["redis"]["properties"]["urlSecretRef"]["properties"]["name"],
             properties["api"]["properties"]["tokenSecretRef"]["properties"]["name"],
             worker["serviceAccountName"], worker["imagePullSecrets"]["items"]["properties"]["name"]]
    for name in names:
        assert name["pattern"] == spec.OBJECT_NAME_RE.pattern
        assert name["maxLength"] == spec.OBJECT_NAME_MAX
    for ref in ("urlSecretRef", "tokenSecretRef"):
        section = "redis" if ref == "urlSecretRef" else "api"
        key = properties[section]["properties"][ref]["properties"]["key"]
        assert key["pattern"] == spec.SECRET_KEY_RE.pattern
    [rule] = worker["podAnnotations"]["x-kubernetes-validations"]
    assert f"k.matches('{spec.REFUSED_POD_ANNOTATION_RE.pattern}')" in rule["rule"]


@pytest.mark.parametrize("key", [
    "container.apparmor.security.beta.kubernetes.io/worker",
    "seccomp.security.alpha.kubernetes.io/pod",
    "container.seccomp.security.alpha.kubernetes.io/worker",
])
def test_security_profile_annotations_are_refused(key: str) -> None:
    with pytest.raises(spec.InvalidSpec) as info:
        parse(sample(MINIMAL, worker={"podAnnotations": {key: "unconfined"}}))
    assert info.value.field == "spec.worker.podAnnotations" and "AppArmor" in str(info.value)


def test_other_annotations_pass() -> None:
    jq = parse(sample(MINIMAL, worker={"podAnnotations": {"prometheus.io/scrape": "true",
                                                          "security.example.com/x": "y"}}))
    assert set(jq.worker.pod_annotations) == {"prometheus.io/scrape", "security.example.com/x"}


OPERATOR = settings.JobQueuePolicy(operator_namespace="antre-system",
                                   operator_service_account="antre-operator")


def in_namespace(namespace: str, **changes: Any) -> spec.JobQueueSpec:
    body = sample(MINIMAL, **changes)
    body["metadata"]["namespace"] = namespace
    return parse(body)


def refusal(jq: spec.JobQueueSpec, rules: settings.JobQueuePolicy) -> policy.NotAllowed:
    with pytest.raises(policy.NotAllowed) as info:
        policy.check_jobqueue(jq, rules)
    assert info.value.reason == "NotAllowed"
    return info.value


def test_the_operators_namespace_is_refused_unless_allowed() -> None:
    assert refusal(in_namespace("antre-system"), OPERATOR).field == "metadata.namespace"
    allowed = settings.JobQueuePolicy(operator_namespace="antre-system",
                                      operator_service_account="antre-operator",
                                      allow_operator_namespace=True)
    policy.check_jobqueue(in_namespace("antre-system"), allowed)
    policy.check_jobqueue(in_namespace("team-a", worker={"serviceAccountName": "antre-operator"}),
                          OPERATOR)  # another namespace's account of that name is not ours
    error = refusal(in_namespace("antre-system", worker={"serviceAccountName": "antre-operator"}),
                    allowed)
    assert error.field == "spec.worker.serviceAccountName" and "operator's own" in str(error)


@pytest.mark.parametrize("image, repository", [
    ("python:3.11", "docker.io/library/python"),
    ("python", "docker.io/library/python"),
    ("acme/app:1", "docker.io/acme/app"),
    ("ghcr.io/acme/app:1.2", "ghcr.io/acme/app"),
    ("ghcr.io/acme/app@sha256:" + "0" * 64, "ghcr.io/acme/app"),
    ("registry:5000/app:1", "registry:5000/app"),
    ("localhost/app", "localhost/app"),
])
def test_image_repositories_spelled_out(image: str, repository: str) -> None:
    assert policy.image_repository(image) == repository


@pytest.mark.parametrize("image, allowed", [
    ("ghcr.io/acme/app:1", True),
    ("ghcr.io/acme/team/app:1", True),
    ("ghcr.io/acme-evil/app:1", False),
    ("ghcr.io/acme.evil.com/app:1", False),
    ("evil.io/ghcr.io/acme/app:1", False),
    ("python:3.11", True),
    ("python3:latest", False),
    ("acme/app", False),
])
def test_image_allow_list_matches_whole_segments(image: str, allowed: bool) -> None:
    prefixes = ("ghcr.io/acme", "docker.io/library/python")
    assert policy.image_allowed(image, prefixes) is allowed
    rules = settings.JobQueuePolicy(image_registries=prefixes)
    jq = in_namespace("team-a", worker={"image": image})
    if allowed:
        policy.check_jobqueue(jq, rules)
    else:
        assert refusal(jq, rules).field == "spec.worker.image"


def test_service_account_allow_list() -> None:
    rules = settings.JobQueuePolicy(service_accounts=("jobs",))
    policy.check_jobqueue(in_namespace("team-a", worker={"serviceAccountName": "jobs"}), rules)
    policy.check_jobqueue(in_namespace("team-a"), rules)  # "default", with no token
    error = refusal(in_namespace("team-a", worker={"serviceAccountName": "deployer"}), rules)
    assert error.field == "spec.worker.serviceAccountName" and "['jobs']" in str(error)


@pytest.mark.parametrize("url, allowed", [
    ("redis://redis.jobs.svc.cluster.local:6379/0", True),
    ("redis://REDIS.jobs.svc.cluster.local.:6379/0", True),
    ("rediss+cluster://node.jobs.svc.cluster.local:6379", True),
    ("redis+sentinel://s1.jobs.svc.cluster.local,s2.jobs.svc.cluster.local/mymaster", True),
    ("redis+sentinel://s1.jobs.svc.cluster.local,10.0.0.1:22/mymaster", False),
    ("redis://10.0.0.1:22/0", False),
    ("redis://kubernetes.default.svc:443/0", False),
])
def test_redis_host_allow_list(url: str, allowed: bool) -> None:
    rules = settings.JobQueuePolicy(redis_hosts=("*.jobs.svc.cluster.local",))
    if allowed:
        policy.check_redis_url(url, rules, field="url")
        policy.check_jobqueue(in_namespace("team-a", redis={"url": url}), rules)
        return
    with pytest.raises(policy.NotAllowed) as info:
        policy.check_redis_url(url, rules, field="url")
    assert "*.jobs.svc.cluster.local" in str(info.value)
    assert url not in str(info.value) and "<redacted>" in str(info.value)
    assert refusal(in_namespace("team-a", redis={"url": url}), rules).field == "spec.redis.url"


def test_api_service_type_allow_list() -> None:
    rules = settings.JobQueuePolicy(api_service_types=("ClusterIP",))
    api = {"enabled": True, "tokenSecretRef": {"name": "token"}}
    policy.check_jobqueue(in_namespace("team-a", api=api), rules)
    policy.check_jobqueue(in_namespace("team-a", api={**api, "enabled": False,
                                                      "serviceType": "LoadBalancer"}), rules)
    error = refusal(in_namespace("team-a", api={**api, "serviceType": "LoadBalancer"}), rules)
    assert error.field == "spec.api.serviceType" and "['ClusterIP']" in str(error)
    policy.check_jobqueue(in_namespace("team-a", api={**api, "serviceType": "NodePort"}),
                          settings.JobQueuePolicy())


def test_no_policy_refuses_nothing_but_the_operators_own() -> None:
    jq = in_namespace("team-a", worker={"image": "anything.example/x:1",
                                        "serviceAccountName": "whatever"},
                      redis={"url": "redis://10.0.0.1:22/0"})
    policy.check_jobqueue(jq, settings.JobQueuePolicy())
    policy.check_jobqueue(jq, OPERATOR)


@pytest.mark.parametrize("url", [
    "redis://r:6379/0?sslmode=require",
    "redis://r:6379/0?db=1&foo=bar",
    "rediss+cluster://r:6379?read_from_replicas=yes",
    "redis+sentinel://s1:26379,s2:26379/mymaster/0?sslmode=require",
])
def test_an_unknown_url_option_is_a_clear_spec_error(url: str) -> None:
    with pytest.raises(spec.InvalidSpec) as info:
        parse(sample(MINIMAL, redis={"url": url}))
    assert info.value.field == "spec.redis.url"
    assert re.search(r"unknown query option '\w+'; the options are .*socket_timeout",
                     str(info.value))


@pytest.mark.parametrize("url, said", [
    ("redis://r:6379/0?socket_timeout=abc",
     "query option socket_timeout: got 'abc'; must be a number of seconds"),
    ("redis+sentinel://s1:26379/mymaster/0?socket_timeout=abc",
     "query option socket_timeout: got 'abc'; must be a number of seconds"),
    ("redis://r:6379/0?ssl_ca_certs=/etc/ca.pem",
     "query option ssl_ca_certs: a TLS option, and the scheme is redis:// (no TLS)"),
    ("redis+sentinel://s1:26379/mymaster/0?ssl_ca_certs=/etc/ca.pem",
     "query option ssl_ca_certs: a TLS option, and the scheme is redis+sentinel:// (no TLS)"),
])
def test_a_bad_url_option_value_is_a_clear_spec_error(url: str, said: str) -> None:
    """Not a Redis that cannot be reached at every poll, nor workers failing at their first
    command (a TLS option without TLS): the option, its value and what it may be, on
    spec.redis.url."""
    with pytest.raises(spec.InvalidSpec) as info:
        parse(sample(MINIMAL, redis={"url": url}))
    assert info.value.field == "spec.redis.url"
    assert said in str(info.value)


@pytest.mark.parametrize("path", ["abc", "1x", "0/1"])
def test_a_database_path_that_is_not_a_number_is_a_clear_spec_error(path: str) -> None:
    """Not jobs written quietly to database 0 (or 1, for /0/1) while the operator reads
    another: spec.redis.url, the path, and what it may be."""
    with pytest.raises(spec.InvalidSpec) as info:
        parse(sample(MINIMAL, redis={"url": f"redis://r:6379/{path}"}))
    assert info.value.field == "spec.redis.url"
    assert f"database {path!r}: the path must be a database number" in str(info.value)


@pytest.mark.parametrize("url", [
    "redis+sentinel://s1:²/mymaster/0",
    "redis+sentinel://s1:26379,[::1]:¹/mymaster/0",
    "redis+sentinel://s1:٢٦٣٧٩/mymaster/0",
])
def test_a_sentinel_port_that_is_not_ascii_digits_is_a_clear_spec_error(url: str) -> None:
    """Not a ValueError from int() at every poll ('²' is a digit to str.isdigit), nor a port
    read from another script's digits: spec.redis.url and what a port may be."""
    with pytest.raises(spec.InvalidSpec) as info:
        parse(sample(MINIMAL, redis={"url": url}))
    assert info.value.field == "spec.redis.url"
    assert "the port must be a number from 1 to 65535" in str(info.value)
