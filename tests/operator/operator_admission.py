"""Admission as the API server does it for the JobQueue CRD, for the tests.

Strict fields (unknown ones rejected where the schema does not keep them), then structural
defaulting, then the CEL ``x-kubernetes-validations`` through Python twins of each rule.
"""

from __future__ import annotations

import copy
import re
from collections.abc import Callable, Iterator
from typing import Any

import jsonschema


def walk(schema: dict[str, Any], path: str = "") -> Iterator[tuple[str, dict[str, Any]]]:
    yield path, schema
    for name, sub in (schema.get("properties") or {}).items():
        yield from walk(sub, f"{path}.{name}")
    if isinstance(schema.get("items"), dict):
        yield from walk(schema["items"], f"{path}[]")
    if isinstance(schema.get("additionalProperties"), dict):
        yield from walk(schema["additionalProperties"], f"{path}.*")


# -- validating like the API server: strict fields, defaulting, CEL ---------------------------

def strict_schema(node: dict[str, Any]) -> dict[str, Any]:
    """The node as JSON Schema, with unknown fields refused where the CRD does not keep them."""
    out = {k: v for k, v in node.items() if not k.startswith("x-kubernetes-")
           and k not in ("properties", "items", "additionalProperties", "default")}
    # OpenAPI v3.0 (the CRD) spells an exclusive bound as a flag beside minimum/maximum;
    # JSON Schema draft 7 as the bound itself.
    for flag, bound in (("exclusiveMinimum", "minimum"), ("exclusiveMaximum", "maximum")):
        if out.get(flag) is True:
            out[flag] = out.pop(bound)
        elif out.get(flag) is False:
            del out[flag]
    if "properties" in node:
        out["properties"] = {k: strict_schema(v) for k, v in node["properties"].items()}
        if not node.get("x-kubernetes-preserve-unknown-fields"):
            out["additionalProperties"] = False
    if isinstance(node.get("items"), dict):
        out["items"] = strict_schema(node["items"])
    if isinstance(node.get("additionalProperties"), dict):
        out["additionalProperties"] = strict_schema(node["additionalProperties"])
    return out


def apply_defaults(node: dict[str, Any], value: Any) -> Any:
    if isinstance(value, dict) and "properties" in node:
        for name, sub in node["properties"].items():
            if name not in value and "default" in sub:
                value[name] = copy.deepcopy(sub["default"])
            if name in value:
                value[name] = apply_defaults(sub, value[name])
    if isinstance(value, list) and isinstance(node.get("items"), dict):
        value = [apply_defaults(node["items"], v) for v in value]
    return value


def _has(obj: dict[str, Any], key: str) -> bool:
    return key in obj


#: Python twins of the CEL rules: rule text -> predicate over the (defaulted) value it applies to.
CEL_TWINS: dict[str, Callable[[dict[str, Any]], bool]] = {
    "self.metadata.name.size() <= 45":
        lambda s: len(s["metadata"]["name"]) <= 45,
    "!has(self.autoscaling) || !self.autoscaling.enabled || self.autoscaling.minReplicas <= self.autoscaling.maxReplicas":  # noqa: E501
        lambda s: (not _has(s, "autoscaling") or not s["autoscaling"]["enabled"]
                   or s["autoscaling"]["minReplicas"] <= s["autoscaling"]["maxReplicas"]),
    "!has(self.api) || !self.api.enabled || has(self.api.tokenSecretRef)":
        lambda s: not _has(s, "api") or not s["api"]["enabled"] or _has(s["api"], "tokenSecretRef"),
    "has(self.url) != has(self.urlSecretRef)":
        lambda s: _has(s, "url") != _has(s, "urlSecretRef"),
    "!has(self.url) || !self.url.contains('@')":
        lambda s: not _has(s, "url") or "@" not in s["url"],
    "!has(self.url) || !self.url.matches('(?i)[?&](password|username)([=&#]|$)')":
        lambda s: not _has(s, "url") or not re.search(r"(?i)[?&](password|username)([=&#]|$)",
                                                      s["url"]),
    "!has(self.url) || !self.tls || self.url.startsWith('rediss://')"
    " || self.url.startsWith('rediss+cluster://')":
        lambda s: (not _has(s, "url") or not s["tls"] or s["url"].startswith("rediss://")
                   or s["url"].startswith("rediss+cluster://")),
    "self.baseSeconds <= self.maxSeconds":
        lambda s: s["baseSeconds"] <= s["maxSeconds"],
}


def cel_errors(node: dict[str, Any], value: Any, path: str = "") -> list[str]:
    errors = []
    for rule in node.get("x-kubernetes-validations", []):
        if not CEL_TWINS[rule["rule"]](value):
            errors.append(rule["message"])
    if isinstance(value, dict):
        for name, sub in (node.get("properties") or {}).items():
            if name in value:
                errors += cel_errors(sub, value[name], f"{path}.{name}")
    return errors


def admit(schema: dict[str, Any], body: dict[str, Any]) -> list[str]:
    """What the API server would say: schema errors first, then CEL messages after defaulting."""
    validator = jsonschema.Draft7Validator(strict_schema(schema))
    errors = [f"{'.'.join(map(str, e.absolute_path))}: {e.message}"
              for e in validator.iter_errors(body)]
    if errors:
        return errors
    return cel_errors(schema, apply_defaults(schema, copy.deepcopy(body)))
