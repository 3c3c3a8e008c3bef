"""docs/helm.md keeps up with the chart.

Aspects: the values table lists every value of values.yaml; the docs carry the install command,
the CRD upgrade step, the Redis Secret name, and the worker-image extension recipe.
"""

from __future__ import annotations

import pytest

from .helm_runner import REPO_ROOT
from .test_values_schema import FREE_FORM, VALUES, leaves

DOC = (REPO_ROOT / "docs" / "helm.md").read_text()
SETTINGS = [path for path, value in leaves(VALUES)
            if not isinstance(value, dict) or not value or path in FREE_FORM]


@pytest.mark.parametrize("path", SETTINGS)
def test_values_table_lists_every_value(path: str) -> None:
    assert f"| `{path}` |" in DOC, f"docs/helm.md values table lacks {path}"


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
