"""The JobQueue CRD: structural-schema rules, defaults, and good and bad samples.

Aspects covered:
* the CRD is structural (every node typed, no additionalProperties beside properties, no $ref),
  names/scope/subresources/printer columns are what ``kubectl get jq`` and ``/scale`` need;
* every default is valid against its own schema, and ``spec.py`` applies the same defaults;
* samples are validated the way the API server would (unknown fields rejected, then defaulting,
  then the CEL ``x-kubernetes-validations``); bad ones fail with the message the CRD declares.

There is no CEL interpreter for Python here, so each CEL rule has a Python twin in
``operator_admission.py`` and a test fails when a rule in the CRD has no twin: a new rule cannot
land untested.
"""

from __future__ import annotations

import copy
from collections.abc import Iterator
from typing import Any

import jsonschema
import pytest
from antre_operator import rendering, settings
from operator_admission import CEL_TWINS, admit, apply_defaults, strict_schema, walk
from operator_samples import FULL, MINIMAL, parse, sample

FORBIDDEN_KEYWORDS = {"$ref", "definitions", "dependencies", "patternProperties", "allOf",
                      "oneOf", "anyOf", "not", "uniqueItems"}


def test_names_scope_and_version(crd: dict[str, Any]) -> None:
    assert crd["metadata"]["name"] == f"{settings.PLURAL}.{settings.GROUP}"
    assert crd["spec"]["group"] == settings.GROUP
    assert crd["spec"]["scope"] == "Namespaced"
    names = crd["spec"]["names"]
    assert (names["kind"], names["plural"]) == ("JobQueue", "jobqueues")
    assert names["shortNames"] == ["jq"]
    [version] = crd["spec"]["versions"]
    assert version["name"] == settings.VERSION
    assert version["served"] and version["storage"]


def test_status_and_scale_subresources(crd: dict[str, Any]) -> None:
    sub = crd["spec"]["versions"][0]["subresources"]
    assert sub["status"] == {}
    assert sub["scale"] == {"specReplicasPath": ".spec.replicas",
                            "statusReplicasPath": ".status.replicas",
                            "labelSelectorPath": ".status.selector"}


def test_printer_columns(crd: dict[str, Any]) -> None:
    columns = {c["name"]: c for c in crd["spec"]["versions"][0]["additionalPrinterColumns"]}
    for name in ("Ready", "Desired", "Backlog", "Processing", "Dead", "Age"):
        assert name in columns
    assert columns["Age"]["type"] == "date"
    assert columns["Backlog"]["jsonPath"] == ".status.backlog"


def test_schema_is_structural(crd_schema: dict[str, Any]) -> None:
    assert crd_schema["type"] == "object"
    assert set(crd_schema["properties"]["metadata"]) == {"type"}, "metadata may only be typed"
    for path, node in walk(crd_schema):
        assert not FORBIDDEN_KEYWORDS & set(node), f"{path}: forbidden keyword"
        assert "type" in node or node.get("x-kubernetes-int-or-string"), f"{path}: no type"
        assert not ("properties" in node and "additionalProperties" in node), path
        if node.get("type") == "array":
            assert "items" in node, f"{path}: arrays need items"


def test_defaults_are_valid_against_their_schema(crd_schema: dict[str, Any]) -> None:
    count = 0
    for _, node in walk(crd_schema):
        if "default" in node:
            count += 1
            jsonschema.validate(node["default"], strict_schema(node))
    assert count > 20, "the spec has defaults"


def test_no_default_on_required_or_status(crd_schema: dict[str, Any]) -> None:
    for path, node in walk(crd_schema["properties"]["status"], ".status"):
        assert "default" not in node, path


def test_every_cel_rule_has_a_twin(crd_schema: dict[str, Any]) -> None:
    rules = [r["rule"] for _, node in walk(crd_schema)
             for r in node.get("x-kubernetes-validations", [])]
    assert set(rules) == set(CEL_TWINS)


@pytest.mark.parametrize("body", [
    pytest.param(MINIMAL, id="minimal"),
    pytest.param(FULL, id="full"),
    pytest.param(sample(MINIMAL, redis={"url": "redis://redis.antre:6380/0"}), id="plain-url"),
    pytest.param(sample(MINIMAL, redis={"url": "rediss://redis:6380/0?ssl_cert_reqs=none",
                                        "tls": True}), id="tls-url-with-options"),
    pytest.param(sample(MINIMAL, redis={"url": "rediss+cluster://redis:6380/0", "tls": True}),
                 id="tls-cluster-url"),
    pytest.param(sample(MINIMAL, autoscaling={"enabled": False, "minReplicas": 5,
                                              "maxReplicas": 1}, replicas=3),
                 id="fixed-replicas-ignores-range"),
    pytest.param(sample(MINIMAL, autoscaling={"minReplicas": 0, "maxReplicas": 1}),
                 id="scale-to-zero"),
])
def test_good_samples_are_admitted(crd_schema: dict[str, Any], body: dict[str, Any]) -> None:
    assert admit(crd_schema, body) == []
    parse(body)  # and the operator accepts what the API server accepts


@pytest.mark.parametrize("schedule", ["@hourly", "@daily", "@yearly", "@midnight", "* * * * *",
                                      "*/5 1-3 * * MON-FRI", "*  * * * *", "0 3 * * * ", " 0 3 * * *",
                                      "0\t3 * *  *"])
def test_schedules_admitted_by_the_crd_and_the_operator(crd_schema: dict[str, Any],
                                                        schedule: str) -> None:
    body = sample(MINIMAL, reaper={"schedule": schedule})
    assert admit(crd_schema, body) == []
    assert parse(body).reaper.schedule == schedule


@pytest.mark.parametrize("schedule", ["@every 1m", "@reboot", "* * * *", "* * * * * *",
                                      "every minute", "@midnight *", "* * * *  ",
                                      # robfig/cron: a macro takes no surrounding space
                                      " @daily", "@daily "])
def test_schedules_refused_by_the_crd_and_the_operator(crd_schema: dict[str, Any],
                                                       schedule: str) -> None:
    body = sample(MINIMAL, reaper={"schedule": schedule})
    assert any("does not match" in e for e in admit(crd_schema, body))
    with pytest.raises(ValueError, match=r"spec\.reaper\.schedule"):
        parse(body)


def test_the_crd_and_the_operator_share_the_schedule_pattern(crd_schema: dict[str, Any]) -> None:
    from antre_operator import spec
    reaper = crd_schema["properties"]["spec"]["properties"]["reaper"]["properties"]
    assert reaper["schedule"]["pattern"] == spec.SCHEDULE_RE.pattern


@pytest.mark.parametrize("body, message", [
    pytest.param(sample(MINIMAL, redis=None), "'redis' is a required property", id="no-redis"),
    pytest.param(sample(MINIMAL, bogus=1), "Additional properties are not allowed",
                 id="unknown-field"),
    pytest.param(sample(MINIMAL, worker={"concurrency": 0}), "0 is less than the minimum of 1",
                 id="concurrency-zero"),
    pytest.param(sample(MINIMAL, autoscaling={"maxReplicas": 1001}),
                 "1001 is greater than the maximum of 1000", id="max-too-high"),
    pytest.param(sample(MINIMAL, api={"serviceType": "ExternalName"}),
                 "'ExternalName' is not one of", id="bad-service-type"),
    pytest.param(sample(MINIMAL, replicas=-1), "-1 is less than the minimum of 0",
                 id="negative-replicas"),
    pytest.param(sample(MINIMAL, redis={"url": "http://redis:6380"}), "does not match",
                 id="wrong-scheme"),
    pytest.param(sample(MINIMAL, autoscaling={"minReplicas": 5, "maxReplicas": 2}),
                 "spec.autoscaling.minReplicas must be <= spec.autoscaling.maxReplicas",
                 id="min-above-max"),
    pytest.param(sample(MINIMAL, redis={"url": "redis://:hunter2@redis:6380/0"}),
                 "spec.redis.url must not contain a password", id="password-in-url"),
    pytest.param(sample(MINIMAL, redis={"url": "redis://:pa/ss@redis:6380/0"}),
                 "spec.redis.url must not contain a password", id="password-with-slash"),
    pytest.param(sample(MINIMAL, redis={"url": "redis://user@redis:6380/0"}),
                 "spec.redis.url must not contain a password", id="user-info"),
    pytest.param(sample(MINIMAL, redis={"url": "redis://redis:6380/0?password=s3cret"}),
                 "must not contain a password or username query parameter",
                 id="password-query"),
    pytest.param(sample(MINIMAL, redis={"url": "redis://redis:6380/0?db=0&Username=u"}),
                 "must not contain a password or username query parameter",
                 id="username-query"),
    pytest.param(sample(MINIMAL, redis={"url": "redis://r:6380",
                                        "urlSecretRef": {"name": "s"}}),
                 "give exactly one of spec.redis.url and spec.redis.urlSecretRef", id="both-urls"),
    pytest.param(sample(MINIMAL, redis={"queue": "q"}),
                 "give exactly one of spec.redis.url and spec.redis.urlSecretRef", id="no-url"),
    pytest.param(sample(MINIMAL, redis={"url": "redis://r:6380", "tls": True}),
                 "spec.redis.tls requires a rediss:// or rediss+cluster:// URL",
                 id="tls-without-rediss"),
    pytest.param(sample(MINIMAL, redis={"url": "redis+cluster://r:6380", "tls": True}),
                 "spec.redis.tls requires a rediss:// or rediss+cluster:// URL",
                 id="tls-cluster-without-rediss"),
    pytest.param(sample(MINIMAL, api={"enabled": True}),
                 "spec.api.tokenSecretRef is required", id="api-without-token"),
    pytest.param(sample(MINIMAL, worker={"backoff": {"baseSeconds": 10, "maxSeconds": 5}}),
                 "baseSeconds must be <= spec.worker.backoff.maxSeconds", id="backoff-inverted"),
    pytest.param(sample(MINIMAL, worker={"backoff": {"baseSeconds": 0}}),
                 "0 is less than or equal to the minimum of 0", id="backoff-base-zero"),
    pytest.param({**MINIMAL, "metadata": {"name": "x" * 46, "namespace": "default"}},
                 "metadata.name must be at most 45 characters", id="name-too-long"),
])
def test_bad_samples_are_rejected(crd_schema: dict[str, Any], body: dict[str, Any],
                                  message: str) -> None:
    errors = admit(crd_schema, body)
    assert any(message in e for e in errors), errors


def defaults_of(node: dict[str, Any], path: str = "spec") -> Iterator[tuple[str, Any]]:
    for name, sub in (node.get("properties") or {}).items():
        if "default" in sub and sub["default"] != {}:
            yield f"{path}.{name}", sub["default"]
        yield from defaults_of(sub, f"{path}.{name}")


def test_operator_applies_the_crd_defaults(crd_schema: dict[str, Any]) -> None:
    """An undefaulted minimal spec parses to the same values as the fully defaulted one."""
    spec_schema = crd_schema["properties"]["spec"]
    defaulted = apply_defaults(spec_schema, copy.deepcopy(MINIMAL["spec"]))
    raw = parse(MINIMAL)
    server = parse({**MINIMAL, "spec": defaulted})
    assert raw == server
    assert len(list(defaults_of(spec_schema))) > 20
    assert raw.worker.image == settings.DEFAULT_WORKER_IMAGE
    rendering.check_name(raw.name)


def test_crd_is_a_valid_object(crd: dict[str, Any]) -> None:
    import kubernetes_validate

    kubernetes_validate.validate(crd, "1.30", strict=True)
