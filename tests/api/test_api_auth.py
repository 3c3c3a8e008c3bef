"""Bearer-token authentication.

Covers: 401 with a WWW-Authenticate challenge for a missing, wrong or non-bearer token, with no
part of the header echoed; a token whose bytes are not UTF-8 is a wrong token too (not a 500
with a traceback in the log); the right token passes; probes, /metrics and /openapi.json are
served without the token.
"""

from __future__ import annotations

import logging
import socket
from typing import Any
from urllib.parse import urlsplit

import pytest

from .conftest import AUTH, TOKEN, running_api


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


@pytest.mark.parametrize("header", [
    pytest.param(TOKEN, id="token-without-scheme"),
    pytest.param(f"Basic {TOKEN}", id="basic"),
    pytest.param(f"Token {TOKEN}", id="other-scheme"),
])
async def test_no_part_of_a_bad_header_is_echoed(secured_client: Any, header: str) -> None:
    response = await secured_client.get("/v1/queues/q/stats", headers={"Authorization": header})
    assert response.status == 401
    body = await response.text()
    assert TOKEN not in body and header.split()[0] not in body
    assert "not a bearer token; send 'Bearer <token>'" in body


@pytest.mark.parametrize("token", [b"\xff\xfe", TOKEN.encode() + b"\x80", b"\xc3"])
def test_a_token_that_is_not_utf8_is_a_wrong_token(redis_url: str, token: bytes,
                                                   caplog: pytest.LogCaptureFixture) -> None:
    """Any client may send any bytes: they are compared as sent, never a 500 (an encoding
    error in the comparison) with a traceback logged per request."""
    caplog.set_level(logging.ERROR, logger="antre.api")
    with running_api(redis_url, token=TOKEN) as base_url:
        address = urlsplit(base_url)
        with socket.create_connection((address.hostname, address.port), timeout=10) as sock:
            sock.sendall(b"GET /v1/queues/q/stats HTTP/1.1\r\nHost: localhost\r\n"
                         b"Authorization: Bearer " + token + b"\r\nConnection: close\r\n\r\n")
            answer = b""
            while chunk := sock.recv(65536):
                answer += chunk
    assert answer.startswith(b"HTTP/1.1 401 "), answer
    assert b"bearer token is wrong" in answer
    assert not [r for r in caplog.records if r.exc_info], "a traceback was logged"
