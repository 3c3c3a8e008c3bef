"""docs/helm.md keeps up with the chart.

Aspects: the values table lists every value of values.yaml; the docs carry the install command,
the CRD upgrade step, the Redis Secret name, and the worker-image extension recipe.
"""

from __future__ import annotations

import json

import pytest

from .helm_runner import REPO_ROOT
from .test_values_schema import FREE_FORM, VALUES, leaves

DOC = (REPO_ROOT / "docs" / "helm.md").read_text()
SETTINGS = [path for path, value in leaves(VALUES)
            if not isinstance(value, dict) or not value or path in FREE_FORM]


@pytest.mark.parametrize("path", SETTINGS)
def test_values_table_lists_every_value(path: str) -> None:
    rows = [line for line in DOC.splitlines() if line.startswith(f"| `{path}` |")]
    assert len(rows) == 1, f"docs/helm.md values table lacks {path}"
    value = dict(leaves(VALUES))[path]
    if path not in FREE_FORM:
        shown = f'"{value}"' if isinstance(value, str) else json.dumps(value)
        assert rows[0].endswith(f"| `{shown}` |"), f"{path}: default in docs differs from values.yaml"


@pytest.mark.parametrize("text", [
    "helm install antre charts/antre",
    "kubectl apply -f crds/",
    "Helm does not upgrade CRDs",
    "<release>-antre-redis",
    "FROM ghcr.io/antre-dev/antre-worker:0.1.0",
    "ANTRE_HANDLERS=myapp.jobs",
])
def test_docs_cover(text: str) -> None:
    assert text in DOC
