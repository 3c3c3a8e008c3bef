"""Validating custom objects (JobQueue, kopf peerings) against their CRD's openAPIV3Schema.

kubernetes-validate only knows built-in kinds. The API server validates custom objects with the
CRD's structural schema and, with strict field validation (kubectl's default), rejects unknown
fields; this helper reproduces both with jsonschema. CEL rules (x-kubernetes-validations) are
not evaluated here; the operator's own tests cover them.
"""

from __future__ import annotations

import copy
from typing import Any

import jsonschema

Schema = dict[str, Any]


def _strict(schema: Schema) -> Schema:
    """Close every object that lists properties, unless it preserves unknown fields."""
    node = dict(schema)
    if "properties" in node:
        node["properties"] = {k: _strict(v) for k, v in node["properties"].items()}
        if not node.get("x-kubernetes-preserve-unknown-fields") and "additionalProperties" not in node:
            node["additionalProperties"] = False
    if isinstance(node.get("additionalProperties"), dict):
        node["additionalProperties"] = _strict(node["additionalProperties"])
    if "items" in node and isinstance(node["items"], dict):
        node["items"] = _strict(node["items"])
    for key in ("allOf", "anyOf", "oneOf"):
        if key in node:
            node[key] = [_strict(s) for s in node[key]]
    # OpenAPI's nullable: allow null beside the declared type.
    if node.get("nullable") and isinstance(node.get("type"), str):
        node["type"] = [node["type"], "null"]
    return node


def validator_for(crd: dict[str, Any], version: str) -> jsonschema.Draft7Validator:
    served = [v for v in crd["spec"]["versions"] if v["name"] == version]
    assert served, f"{crd['metadata']['name']} serves no version {version}"
    schema = copy.deepcopy(served[0]["schema"]["openAPIV3Schema"])
    # The API server owns metadata, apiVersion and kind; the schema need not spell them out.
    schema.setdefault("properties", {})
    schema["properties"]["metadata"] = {"type": "object", "x-kubernetes-preserve-unknown-fields": True}
    schema["properties"]["apiVersion"] = {"type": "string"}
    schema["properties"]["kind"] = {"type": "string"}
    return jsonschema.Draft7Validator(_strict(schema))


def crd_for(crds: dict[str, Any], obj: dict[str, Any]) -> dict[str, Any] | None:
    group, _, _ = obj["apiVersion"].rpartition("/")
    for crd in crds.values():
        if crd["spec"]["group"] == group and crd["spec"]["names"]["kind"] == obj["kind"]:
            return crd
    return None


def validation_errors(crds: dict[str, Any], obj: dict[str, Any]) -> list[str]:
    crd = crd_for(crds, obj)
    if crd is None:
        return [f"no CRD in charts/antre/crds for {obj['apiVersion']} {obj['kind']}"]
    version = obj["apiVersion"].rpartition("/")[2]
    if crd["spec"]["scope"] == "Namespaced" and not obj["metadata"].get("namespace"):
        return [f"{obj['kind']} is namespaced but has no metadata.namespace"]
    errors = validator_for(crd, version).iter_errors(obj)
    return [f"{'.'.join(map(str, e.absolute_path)) or '<root>'}: {e.message}" for e in errors]
