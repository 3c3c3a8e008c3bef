"""Fixtures of the dashboard's HTTP tests: ``antre api`` with the dashboard in-process (aiohttp's
test server) over the real test Redis, and a client signed in through the real form."""

from __future__ import annotations

import re
from collections.abc import AsyncIterator
from typing import Any

import pytest
import redis.asyncio
from aiohttp.test_utils import TestClient, TestServer
from antre import api, settings
from antre.dashboard.state import DashboardSettings

TOKEN = "dash-token"
QUEUES = ("emails", "reports")


def csrf_of(html: str) -> str:
    found = re.search(r'name="csrf" value="([^"]+)"', html)
    assert found, "no CSRF token on the page"
    return found.group(1)


async def sign_in(client: TestClient[Any, Any]) -> str:
    """Signs in through the form; returns the session's CSRF token."""
    form = await client.get("/ui/login")
    answer = await client.post("/ui/login", data={"csrf": csrf_of(await form.text()),
                                                  "token": TOKEN, "next": "/ui/"})
    assert answer.status == 200 and str(answer.url).endswith("/ui/")
    return csrf_of(await answer.text())


@pytest.fixture
async def aredis(redis_client: Any, redis_url: str) -> AsyncIterator[Any]:
    client = redis.asyncio.Redis.from_url(redis_url, decode_responses=True)
    yield client
    await client.aclose()


@pytest.fixture
async def ui(aredis: Any) -> AsyncIterator[TestClient[Any, Any]]:
    app = api.create_app(aredis, queue_template=settings.QueueSettings(),
                         api_settings=api.ApiSettings(queues=QUEUES, token=TOKEN),
                         dashboard=DashboardSettings(live_interval_s=0.2, detail_interval_s=0.2))
    client: TestClient[Any, Any] = TestClient(TestServer(app))
    await client.start_server()
    yield client
    await client.close()
