"""Fixtures for the HTTP API: an in-process aiohttp test client over real Redis, and a real
server on a free loopback port (in a thread) for schemathesis and the load check."""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import AsyncIterator, Iterator
from typing import Any

import pytest
import redis.asyncio
from aiohttp.test_utils import TestClient, TestServer
from antre import api, settings
from redis_servers import free_port

TOKEN = "s3cret-token"
AUTH = {"Authorization": f"Bearer {TOKEN}"}
#: Queues the test APIs serve; a request for any other queue gets 403.
SERVED = ("q", "emails", "default")


def api_settings(**overrides: Any) -> api.ApiSettings:
    """Settings serving SERVED; without a token, explicitly anonymous."""
    values = {"queues": SERVED, **overrides}
    values.setdefault("anonymous", "token" not in values)
    return api.ApiSettings(**values)


@contextlib.asynccontextmanager
async def api_client_for(redis_url: str, **settings_values: Any) -> AsyncIterator[TestClient[Any, Any]]:
    redis_client = redis.asyncio.Redis.from_url(redis_url, decode_responses=True)
    app = api.create_app(redis_client, queue_template=settings.QueueSettings(),
                         api_settings=api_settings(**settings_values))
    client: TestClient[Any, Any] = TestClient(TestServer(app))
    await client.start_server()
    try:
        yield client
    finally:
        await client.close()
        await redis_client.aclose()


@pytest.fixture
async def client(redis_client: Any, redis_url: str) -> AsyncIterator[TestClient[Any, Any]]:
    """No token (explicitly anonymous); serves SERVED."""
    async with api_client_for(redis_url) as test_client:
        yield test_client


@pytest.fixture
async def secured_client(redis_client: Any, redis_url: str) -> AsyncIterator[TestClient[Any, Any]]:
    async with api_client_for(redis_url, token=TOKEN) as test_client:
        yield test_client


@contextlib.contextmanager
def running_api(redis_url: str, **settings_values: Any) -> Iterator[str]:
    """A real API server (api.start: the connection cap included) on 127.0.0.1:<free port> in a
    background thread; yields its base URL."""
    port = free_port()
    loop = asyncio.new_event_loop()
    started = threading.Event()
    holder: dict[str, Any] = {}

    async def start() -> None:
        redis_client = redis.asyncio.Redis.from_url(redis_url, decode_responses=True)
        app = api.create_app(redis_client, api_settings=api_settings(**settings_values))
        holder.update(running=await api.start(app, host="127.0.0.1", port=port),
                      redis=redis_client)

    def serve() -> None:
        asyncio.set_event_loop(loop)
        loop.run_until_complete(start())
        started.set()
        loop.run_forever()

    thread = threading.Thread(target=serve, name="antre-api-test", daemon=True)
    thread.start()
    assert started.wait(10), "API server did not start"
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        async def stop() -> None:
            await holder["running"].close()
            await holder["redis"].aclose()

        asyncio.run_coroutine_threadsafe(stop(), loop).result(10)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(10)
        loop.close()
