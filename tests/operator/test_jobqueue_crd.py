"""The JobQueue CRD file agrees with the operator's constants and parser.

What the API server does with the CRD (structural schema, defaults, CEL rules, refusing bad
JobQueues with the field named) is tested against a real API server in tests/e2e/test_crd.py;
these checks need no server: the names match ``settings``, the status has no defaults, and the
CEL rules for the reaper schedule use the operator's own patterns, and the schema of an env entry
is the parser's (its fields, valueFrom's sources and their required fields, the name pattern,
the names the operator reserves). The /scale subresource and
the printer columns are exercised with kubectl in tests/e2e/test_operator_journeys.py.
"""

from __future__ import annotations

from typing import Any

from antre_operator import schedules, settings, spec


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


def test_no_default_on_status(crd_schema: dict[str, Any]) -> None:
    """The operator owns the status: a default would pass for something it reported."""
    def defaults(node: Any, path: str) -> list[str]:
        if not isinstance(node, dict):
            return []
        found = [path] if "default" in node else []
        for name, sub in (node.get("properties") or {}).items():
            found += defaults(sub, f"{path}.{name}")
        return found + defaults(node.get("items"), f"{path}[]")

    assert defaults(crd_schema["properties"]["status"], "status") == []


def test_schedule_rules_use_the_operators_field_patterns(crd_schema: dict[str, Any]) -> None:
    reaper = crd_schema["properties"]["spec"]["properties"]["reaper"]["properties"]
    schedule = reaper["schedule"]
    assert schedule["pattern"] == schedules.SCHEDULE_RE.pattern
    rules = schedule["x-kubernetes-validations"]
    for index, (name, allowed, pattern) in enumerate(schedules.CRON_FIELDS):
        assert f'[{index}].matches("{pattern}")' in rules[index]["rule"], name
        assert rules[index]["message"] == (
            f"spec.reaper.schedule: {schedules.cron_field_message(name, allowed)}")
    assert rules[-1]["rule"] == schedules.CRON_RANGE_RULE
    assert rules[-1]["message"] == f"spec.reaper.schedule: {schedules.CRON_RANGE_MESSAGE}"


def test_env_entries_have_the_parsers_schema(crd_schema: dict[str, Any]) -> None:
    worker = crd_schema["properties"]["spec"]["properties"]["worker"]["properties"]
    item = worker["env"]["items"]
    assert "x-kubernetes-preserve-unknown-fields" not in item, "unknown fields are pruned"
    assert tuple(item["properties"]) == spec.ENV_FIELDS
    assert item["required"] == ["name"]
    assert item["properties"]["name"]["pattern"] == spec.ENV_NAME_RE.pattern
    reserved, not_both = item["x-kubernetes-validations"]
    assert [f"startsWith('{prefix}')" in reserved["rule"]
            for prefix in spec.RESERVED_ENV_PREFIXES] == [True]
    assert [f"!= '{name}'" in reserved["rule"] for name in spec.RESERVED_ENV_NAMES] == [True]
    assert not_both["rule"] == "!(has(self.value) && has(self.valueFrom))"
    value_from = item["properties"]["valueFrom"]
    [rule] = value_from["x-kubernetes-validations"]
    assert rule["rule"] == " + ".join(f"(has(self.{source}) ? 1 : 0)"
                                      for source in spec.ENV_SOURCES) + " == 1"
    sources = value_from["properties"]
    assert tuple(sources) == tuple(spec.ENV_SOURCES)
    for source, (required, optional) in spec.ENV_SOURCES.items():
        assert sources[source]["required"] == list(required), source
        assert tuple(sources[source]["properties"]) == required + optional, source
    for source in ("secretKeyRef", "configMapKeyRef"):
        fields = sources[source]["properties"]
        assert fields["name"]["pattern"] == spec.OBJECT_NAME_RE.pattern
        assert fields["key"]["pattern"] == spec.SECRET_KEY_RE.pattern
        assert fields["name"]["maxLength"] == fields["key"]["maxLength"] == spec.OBJECT_NAME_MAX
