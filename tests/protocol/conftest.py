"""Fixtures of the per-script tests: one queue's settings and a worker's, short and readable."""

from __future__ import annotations

import pytest
from antre.settings import QueueSettings, WorkerSettings


@pytest.fixture
def qs() -> QueueSettings:
    return QueueSettings(name="q", done_ttl_s=600, idempotency_ttl_s=300,
                         idempotency_done_ttl_s=900)


@pytest.fixture
def ws() -> WorkerSettings:
    return WorkerSettings(visibility_timeout_s=30, lock_defer_s=2.0, lock_max_deferrals=3)
