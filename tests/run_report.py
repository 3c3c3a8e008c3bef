"""Figures a test measured (start-up times, request counts, reaction times), printed in the
run's terminal summary so they are in CI's log.

A test appends lines to :data:`pending`; the root conftest attaches them to that test's report
(as ``user_properties``), which pytest-xdist carries from its workers to the process that
prints the summary.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

PROPERTY = "run_report"

pending: list[str] = []


def take_pending() -> list[tuple[str, str]]:
    taken = [(PROPERTY, line) for line in pending]
    pending.clear()
    return taken


def lines_of(user_properties: Iterable[tuple[str, Any]]) -> list[str]:
    return [str(value) for key, value in user_properties if key == PROPERTY]
