"""values.yaml and values.schema.json: bad values are rejected, the two files agree.

Aspects: helm rejects unknown keys at any depth, wrong types and out-of-range numbers with a
message naming the value; every key of values.yaml is in the schema with a description and the
same default; every key of values.yaml has a comment above it (the file is the documentation).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from .helm_runner import CHART_DIR, render, render_error

VALUES_PATH = CHART_DIR / "values.yaml"
SCHEMA = json.loads((CHART_DIR / "values.schema.json").read_text())
VALUES = yaml.safe_load(VALUES_PATH.read_text())


@pytest.mark.parametrize(
    ("setting", "message"),
    [
        pytest.param("operator.replicaCount=-1", "minimum: got -1, want 0", id="negative-replicas"),
        pytest.param("unknownKey=1", "additional properties 'unknownKey' not allowed",
                     id="unknown-top-level-key"),
        pytest.param("operator.replicas=2", "additional properties 'replicas' not allowed",
                     id="mistyped-nested-key"),
        pytest.param("redis.enabled=yes-please", "got string, want boolean", id="wrong-type"),
        pytest.param("operator.image.pullPolicy=Sometimes", "/operator/image/pullPolicy",
                     id="bad-enum"),
        pytest.param("operator.health.port=70000", "maximum: got 70,000, want 65,535",
                     id="port-out-of-range"),
        pytest.param("operator.watchNamespaces[0]=Team_A", "/operator/watchNamespaces/0",
                     id="namespace-not-dns"),
        pytest.param("redis.persistence.size=lots", "/redis/persistence/size", id="bad-quantity"),
        pytest.param("redis.image.digest=latest", "/redis/image/digest", id="bad-digest"),
        pytest.param("exampleJobQueue.uninstallHook.timeoutSeconds=0", "minimum: got 0, want 1",
                     id="no-time-to-uninstall"),
    ],
)
def test_bad_values_are_rejected(helm: str, tmp_path: Path, setting: str, message: str) -> None:
    error = render_error(helm, tmp_path, {}, setting)
    assert "values don't meet the specifications of the schema" in error or "antre:" in error
    assert message in error, error


@pytest.mark.parametrize(("values", "message"), [
    pytest.param({"operator": {"health": {"port": 8000}}},
                 "operator.health.port and operator.metrics.port are both 8000", id="one-port"),
    pytest.param({"redis": {"enabled": True, "architecture": "replication",
                            "sentinel": {"port": 6379}}},
                 "redis.sentinel.port is 6379, the port Redis itself listens on", id="sentinel"),
])
def test_two_servers_on_one_port_are_refused(helm: str, tmp_path: Path, values: dict[str, Any],
                                             message: str) -> None:
    """Values the schema accepts one by one, but not together: two servers of one pod on one
    port would leave one of them failing to bind, a crash loop with no word of why."""
    assert message in render_error(helm, tmp_path, values)


def test_one_port_is_fine_when_metrics_are_off(helm: str, tmp_path: Path) -> None:
    rendering = render(helm, {"operator": {"health": {"port": 8000},
                                           "metrics": {"enabled": False}}}, tmp_path)
    assert rendering.of_kind("Deployment")


def leaves(values: dict[str, Any], prefix: str = "") -> list[tuple[str, Any]]:
    """(dotted.key, value) of every key, descending into maps but not into free-form ones."""
    out = []
    for key, value in values.items():
        path = f"{prefix}{key}"
        out.append((path, value))
        if isinstance(value, dict) and value and path not in FREE_FORM:
            out += leaves(value, path + ".")
    return out


# Maps whose keys are user data (labels, resources, a JobQueue spec), not chart settings.
FREE_FORM = {"operator.resources", "redis.resources", "redis.sentinel.resources",
             "exampleJobQueue.spec", "exampleJobQueue.uninstallHook.resources"}


def schema_at(path: str) -> dict[str, Any]:
    node = SCHEMA
    for key in path.split("."):
        node = node["properties"][key]
    return node


@pytest.mark.parametrize(("path", "value"), leaves(VALUES), ids=[p for p, _ in leaves(VALUES)])
def test_schema_describes_every_value_with_its_default(path: str, value: Any) -> None:
    node = schema_at(path)
    assert node.get("description"), f"{path} has no description in values.schema.json"
    assert node.get("default") == value, f"{path}: schema default differs from values.yaml"


def test_every_object_in_the_schema_is_closed() -> None:
    def walk(node: dict[str, Any], path: str) -> None:
        if "properties" in node:
            assert node.get("additionalProperties") is False, f"{path or '<root>'} is open"
            for key, child in node["properties"].items():
                walk(child, f"{path}.{key}".lstrip("."))
    walk(SCHEMA, "")


def test_every_value_is_documented_above_its_key() -> None:
    """cert-manager style: a comment right above every setting (sections may go without)."""
    lines = VALUES_PATH.read_text().splitlines()
    assert lines[0] == "# yaml-language-server: $schema=values.schema.json"
    settings = {path for path, value in leaves(VALUES) if not isinstance(value, dict) or not value
                or path in FREE_FORM}
    stack: list[tuple[int, str]] = []  # (indent, key) of the enclosing keys
    undocumented = []
    for number, line in enumerate(lines):
        stripped = line.strip()
        if not stripped or stripped.startswith(("#", "-")) or ":" not in stripped:
            continue
        indent = len(line) - len(stripped)
        while stack and stack[-1][0] >= indent:
            stack.pop()
        key = stripped.split(":", 1)[0]
        stack.append((indent, key))
        path = ".".join(k for _, k in stack)
        if path in settings and not lines[number - 1].strip().startswith("#"):
            undocumented.append(f"line {number + 1}: {path}")
    assert not undocumented, "\n".join(undocumented)


def templates_text() -> str:
    """All templates, with the chart's local aliases spelled out as .Values paths."""
    text = "\n".join(p.read_text() for p in sorted((CHART_DIR / "templates").iterdir()))
    for alias, path in (("$op.", ".Values.operator."), ("$redis.", ".Values.redis."),
                        ("$spec", ".Values.exampleJobQueue.spec")):
        text = text.replace(alias, path)
    return text


@pytest.mark.parametrize("path", [p for p, v in leaves(VALUES)
                                  if not isinstance(v, dict) or not v or p in FREE_FORM])
def test_every_value_is_used_by_a_template(path: str) -> None:
    """A value no template reads is a lie in the docs (cert-manager's values linter)."""
    text = templates_text()
    if f".Values.{path}" in text:
        return
    parent, _, leaf = path.rpartition(".")
    via_image_helper = (parent.endswith(".image") and leaf in {"repository", "tag", "digest"}
                        and f'include "antre.image" (dict "image" .Values.{parent}' in text)
    assert via_image_helper, f"no template reads .Values.{path}"
