"""Fixtures of the operator tests: the CRD and its schema.

Sample JobQueues live in ``operator_samples.py``; the kopf + kmock integration helpers in
``operator_emulation.py`` (module names prefixed so they never collide with other test dirs).
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

sys.path.insert(0, str(Path(__file__).parent))

from operator_samples import CRD_PATH


def pytest_configure(config: pytest.Config) -> None:
    # hypothesis' failure report touches mypy_extensions.TypedDict, deprecated in this
    # environment; with warnings as errors that would hide the real falsifying example.
    config.addinivalue_line(
        "filterwarnings", "ignore:mypy_extensions.TypedDict is deprecated:DeprecationWarning")


@pytest.fixture(scope="session")
def crd() -> dict[str, Any]:
    with CRD_PATH.open() as f:
        return dict(yaml.safe_load(f))


@pytest.fixture(scope="session")
def crd_schema(crd: dict[str, Any]) -> dict[str, Any]:
    return dict(crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"])
