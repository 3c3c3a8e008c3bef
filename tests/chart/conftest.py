"""Chart fixtures: helm itself, and the chart rendered once per variant.

A missing helm FAILS the tests with the command that fetches it, rather than skipping them:
a chart that was never rendered must not pass as "skipped".
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import yaml

from .helm_runner import VARIANTS, Rendering, find_helm, render


@pytest.fixture(scope="session")
def helm() -> str:
    path = find_helm()
    if path is None:
        pytest.fail(
            "helm not found (env HELM, PATH, or .cache/helm/bin/helm). "
            "Fetch it with: bash scripts/fetch_helm.sh",
            pytrace=False,
        )
    return path


@pytest.fixture(scope="module", params=sorted(VARIANTS))
def variant(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture(scope="module")
def rendering(helm: str, variant: str, tmp_path_factory: pytest.TempPathFactory) -> Rendering:
    return render(helm, VARIANTS[variant], tmp_path_factory.mktemp(variant))


@pytest.fixture(scope="module")
def rendered(
    helm: str, tmp_path_factory: pytest.TempPathFactory
) -> Callable[[dict[str, Any]], Rendering]:
    """rendered(values): render ad-hoc values, once per module for equal values."""
    cache: dict[str, Rendering] = {}

    def _render(values: dict[str, Any]) -> Rendering:
        key = yaml.safe_dump(values, sort_keys=True)
        if key not in cache:
            cache[key] = render(helm, values, tmp_path_factory.mktemp("adhoc"))
        return cache[key]

    return _render
