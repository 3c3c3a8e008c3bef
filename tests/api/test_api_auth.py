"""Bearer-token authentication.

Covers: 401 with a WWW-Authenticate challenge for a missing, wrong or non-bearer token; the
right token passes; probes, /metrics and /openapi.json are served without the token.
"""

from __future__ import annotations

from typing import Any

import pytest

from .conftest import AUTH, TOKEN


@pytest.mark.parametrize("headers", [
    pytest.param({}, id="missing"),
    pytest.param({"Authorization": "Bearer wrong"}, id="wrong"),
    pytest.param({"Authorization": f"Bearer {TOKEN}x"}, id="longer"),
    pytest.param({"Authorization": f"Basic {TOKEN}"}, id="not-bearer"),
])
async def test_missing_or_bad_token_is_401(secured_client: Any, headers: dict[str, str]) -> None:
    for method, path in [("POST", "/v1/queues/q/jobs"), ("GET", "/v1/queues/q/stats"),
                         ("GET", "/v1/queues/q/dead")]:
        response = await secured_client.request(method, path, json={"type": "t"}, headers=headers)
        assert response.status == 401, path
        assert response.headers["WWW-Authenticate"].startswith("Bearer")
        assert (await response.json())["error"] == "unauthorized"


async def test_right_token_passes(secured_client: Any) -> None:
    response = await secured_client.post("/v1/queues/q/jobs", json={"type": "t"}, headers=AUTH)
    assert response.status == 202


@pytest.mark.parametrize("path", ["/healthz", "/readyz", "/metrics", "/openapi.json"])
async def test_open_paths_need_no_token(secured_client: Any, path: str) -> None:
    assert (await secured_client.get(path)).status == 200


async def test_unknown_path_outside_the_api_is_404_without_a_token(secured_client: Any) -> None:
    response = await secured_client.get("/nope")
    assert response.status == 404 and (await response.json())["error"] == "not_found"


async def test_a_non_bearer_scheme_is_named(secured_client: Any) -> None:
    response = await secured_client.get("/v1/queues/q/stats",
                                        headers={"Authorization": f"Basic {TOKEN}"})
    assert response.status == 401
    assert "scheme 'Basic'; must be 'Bearer <token>'" in (await response.json())["message"]
