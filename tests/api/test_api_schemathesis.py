"""Property-based conformance: schemathesis generates requests from /openapi.json (valid and
invalid ones) against a real server on a loopback port, with a token configured, and checks
every default rule: no 5xx, documented status codes, content types, headers and response schemas,
invalid data rejected, valid data accepted, auth not ignored. Bounded to a few examples per
operation so the run stays well under a minute."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
import schemathesis
from hypothesis import HealthCheck, settings
from redis_servers import RedisServer

from .conftest import AUTH, TOKEN, running_api


@pytest.fixture(scope="module")
def api_schema(redis_server: RedisServer) -> Iterator[Any]:
    with running_api(redis_server.url, token=TOKEN) as base_url:
        yield schemathesis.openapi.from_url(f"{base_url}/openapi.json")


schema = schemathesis.pytest.from_fixture("api_schema")


@schema.parametrize()
@settings(max_examples=20, deadline=None, suppress_health_check=list(HealthCheck),
          derandomize=True)
def test_api_conforms_to_its_openapi_document(case: Any) -> None:
    case.call_and_validate(headers=AUTH, timeout=10)
