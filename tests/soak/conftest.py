"""The soak tests drive real worker processes through bench/chaos.py (the repository root is on
the pytest ``pythonpath``)."""

from __future__ import annotations

import pytest


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "soak: runs real worker processes under chaos for about a minute")
