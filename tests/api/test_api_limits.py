"""One definition of each enqueue limit (antre.limits): the HTTP API (and its OpenAPI schema),
the Python client's encoder, ``antre enqueue`` and ``ANTRE_MAX_ATTEMPTS`` accept and refuse the
same ``max_attempts`` and delays."""

from __future__ import annotations

from typing import Any

import pytest
from antre import InvalidArgument, Queue, cli, errors, limits, openapi, settings

ATTEMPTS = [1, limits.MAX_ATTEMPTS, limits.MAX_ATTEMPTS + 1, 5000]
DELAYS = [0, 365 * 86_400 + 1, 2 * 365 * 86_400, limits.MAX_DELAY_S, limits.MAX_DELAY_S + 1]


def accepted_by_the_client(redis_client: Any, **options: Any) -> bool:
    try:
        Queue(redis_client, "q").enqueue("t", {}, **options)
    except InvalidArgument:
        return False
    return True


def accepted_by_the_cli(redis_url: str, *args: str) -> bool:
    return cli.main(["enqueue", "t", "{}", "--redis-url", redis_url, "--queue", "q", *args]) == 0


async def accepted_by_the_api(client: Any, **body: Any) -> bool:
    response = await client.post("/v1/queues/q/jobs", json={"type": "t", **body})
    assert response.status in (202, 400), await response.text()
    return response.status == 202


@pytest.mark.parametrize("attempts", ATTEMPTS)
async def test_max_attempts_is_refused_alike(client: Any, redis_client: Any, redis_url: str,
                                             attempts: int) -> None:
    expected = attempts <= limits.MAX_ATTEMPTS
    try:
        settings.QueueSettings(max_attempts=attempts)
        as_queue_default = True
    except errors.InvalidArgument:
        as_queue_default = False
    assert (await accepted_by_the_api(client, max_attempts=attempts),
            accepted_by_the_client(redis_client, max_attempts=attempts),
            accepted_by_the_cli(redis_url, "--max-attempts", str(attempts)),
            as_queue_default) == (expected,) * 4


@pytest.mark.parametrize("delay", DELAYS)
async def test_delays_are_refused_alike(client: Any, redis_client: Any, redis_url: str,
                                        delay: int) -> None:
    expected = delay <= limits.MAX_DELAY_S
    assert (await accepted_by_the_api(client, delay_seconds=delay),
            accepted_by_the_client(redis_client, delay=delay),
            accepted_by_the_cli(redis_url, "--delay", str(delay))) == (expected,) * 3


def test_the_schema_states_the_same_limits() -> None:
    schema = openapi.document()["components"]["schemas"]["EnqueueRequest"]["properties"]
    assert schema["max_attempts"]["maximum"] == limits.MAX_ATTEMPTS
    assert schema["delay_seconds"]["maximum"] == limits.MAX_DELAY_S
