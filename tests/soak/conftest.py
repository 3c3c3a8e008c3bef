"""The soak tests drive real worker processes through bench/chaos.py (importable from the repo root)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "soak: runs real worker processes under chaos for about a minute")
