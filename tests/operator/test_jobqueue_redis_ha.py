"""JobQueues on a Sentinel group and with durable writes: ``redis+sentinel://`` URLs in the spec
and in Secrets, their errors (never echoing the URL), ``spec.redis.durableReplicas`` in the
env of every pod that writes to the queue, and its refusal with a Redis Cluster URL."""

from __future__ import annotations

from typing import Any

import pytest
from antre_operator import rendering, spec
from operator_samples import MINIMAL, parse, sample

SENTINEL = "redis+sentinel://s1:26379,s2:26379,s3:26379/mymaster/0"


def env_of(manifest: dict[str, Any]) -> dict[str, str | None]:
    pod = manifest["spec"]["template"]["spec"]
    if "jobTemplate" in manifest["spec"]:
        pod = manifest["spec"]["jobTemplate"]["spec"]["template"]["spec"]
    return {e["name"]: e.get("value") for e in pod["containers"][0]["env"]}


def test_a_sentinel_url_is_accepted_plain_and_with_tls() -> None:
    assert parse(sample(MINIMAL, redis={"url": SENTINEL})).redis.url == SENTINEL
    tls = "rediss+sentinel://s1,s2/mymaster?ssl_ca_certs=/etc/ca.pem"
    assert parse(sample(MINIMAL, redis={"url": tls, "tls": True})).redis.tls
    spec.check_redis_url("redis+sentinel://:hunter2@s1/m?sentinel_password=x", field="url",
                         tls=False)  # from a Secret, credentials are fine


@pytest.mark.parametrize("url, tls, fragment", [
    pytest.param("redis+sentinel://guard-a:26379", False, "service name is missing",
                 id="no-service"),
    pytest.param("redis+sentinel://guard-a:hunter2/m", False, "port must be a number",
                 id="bad-port"),
    pytest.param("redis+sentinel://guard-a/m", True, "must be rediss://", id="tls"),
    pytest.param("redis+sentinel://guard-a/m?sentinel_password=hunter2", False,
                 "password or username query parameter", id="sentinel-password-in-spec"),
])
def test_bad_sentinel_urls_name_the_field_and_never_the_url(url: str, tls: bool,
                                                            fragment: str) -> None:
    with pytest.raises(spec.InvalidSpec) as info:
        parse(sample(MINIMAL, redis={"url": url, "tls": tls}))
    assert info.value.field == "spec.redis.url"
    assert fragment in str(info.value)
    assert "hunter2" not in str(info.value) and "guard-a" not in str(info.value)


def test_durable_replicas_reach_every_pod_that_writes() -> None:
    jq = parse(sample(MINIMAL, redis={"url": SENTINEL, "durableReplicas": 1,
                                      "durableTimeoutSeconds": 0.5},
                      api={"enabled": True, "tokenSecretRef": {"name": "t"}}))
    assert (jq.redis.durable_replicas, jq.redis.durable_timeout_s) == (1, 0.5)
    children = [rendering.render_worker_deployment(jq, "uid", replicas=1),
                rendering.render_api_deployment(jq, "uid")]
    for manifest in children:
        env = env_of(manifest)
        assert env["ANTRE_DURABLE_REPLICAS"] == "1" and env["ANTRE_DURABLE_TIMEOUT"] == "0.5"
        assert env["ANTRE_REDIS_URL"] == SENTINEL


def test_without_durable_replicas_the_env_is_unchanged() -> None:
    jq = parse(sample(MINIMAL, redis={"url": SENTINEL}))
    assert "ANTRE_DURABLE_REPLICAS" not in env_of(
        rendering.render_worker_deployment(jq, "uid", replicas=1))


@pytest.mark.parametrize("changes, field, fragment", [
    pytest.param({"url": "redis+cluster://r:7000", "durableReplicas": 1},
                 "spec.redis.durableReplicas", "must be 0 with a Redis Cluster URL", id="cluster"),
    pytest.param({"url": SENTINEL, "durableReplicas": -1}, "spec.redis.durableReplicas",
                 "between 0 and 100", id="negative"),
    pytest.param({"url": SENTINEL, "durableTimeoutSeconds": 0}, "spec.redis.durableTimeoutSeconds",
                 "between 0.001 and 60", id="zero-timeout"),
])
def test_bad_durable_settings(changes: dict[str, Any], field: str, fragment: str) -> None:
    with pytest.raises(spec.InvalidSpec) as info:
        parse(sample(MINIMAL, redis=changes))
    assert info.value.field == field and fragment in str(info.value)
