"""Fixtures of the worker tests: a queue and an asyncio Redis client on the flushed test database."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest
from antre.connection import connect_async
from antre.settings import QueueSettings


@pytest.fixture
def qs() -> QueueSettings:
    return QueueSettings(name="wq", max_attempts=3)


@pytest.fixture
async def aredis(redis_url: str, redis_client: Any) -> AsyncIterator[Any]:
    # Depends on redis_client so the database is flushed first.
    client = connect_async(redis_url)
    yield client
    await client.aclose()
