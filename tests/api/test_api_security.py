"""The API fails closed and is scoped to its queue (docs/security.md, "The HTTP API").

Covers: settings refuse a blank token and a missing one without an explicit ``anonymous``;
``antre api`` with ``ANTRE_API_TOKEN`` set but blank stops with one line, as it does without any
token; ``--no-auth`` listens on 127.0.0.1 only; a token for queue A neither reads nor writes
queue B (403, nothing written) and /metrics names only served queues; ``--metrics-auth`` guards
/metrics; a body that stalls gets 408 and its connection closed; connections over the cap get
503 at once while the others are served; names with a trailing newline are refused (400, not a
500 after the write).
"""

from __future__ import annotations

import http.client
import json
import logging
import re
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import Any

import pytest
from antre import Queue, api, errors, keys, loopback
from antre.commands import EXIT_USAGE
from redis_servers import child_env, free_port, wait_until

from .conftest import AUTH, TOKEN, api_client_for, running_api

ANTRE = str(Path(sys.executable).parent / "antre")


@pytest.mark.parametrize(("values", "message"), [
    pytest.param({"token": ""}, "token: set but empty", id="empty"),
    pytest.param({"token": " \n"}, "token: set but empty", id="whitespace"),
    pytest.param({}, "token: missing", id="none-without-anonymous"),
    pytest.param({"token": TOKEN, "anonymous": True}, "choose one", id="both"),
    pytest.param({"token": TOKEN, "queues": ()}, "queues: empty", id="no-queue"),
    pytest.param({"token": TOKEN, "queues": ("q\n",)}, re.escape("queue: got 'q\\n'"),
                 id="newline-queue"),
])
def test_settings_fail_closed(values: dict[str, Any], message: str) -> None:
    with pytest.raises(errors.InvalidArgument, match=message):
        api.ApiSettings(**{"queues": ("q",), **values})


@pytest.mark.parametrize(("env", "message"), [
    pytest.param({"ANTRE_API_TOKEN": ""}, "ANTRE_API_TOKEN: set but empty", id="empty-secret-key"),
    pytest.param({"ANTRE_API_TOKEN": "  \n"}, "ANTRE_API_TOKEN: set but empty", id="blank"),
    pytest.param({}, "token: missing; set ANTRE_API_TOKEN, or choose --no-auth", id="unset"),
])
def test_the_command_refuses_to_start_open(redis_url: str, env: dict[str, str],
                                           message: str) -> None:
    base = {k: v for k, v in child_env().items() if k != "ANTRE_API_TOKEN"}
    proc = subprocess.run([ANTRE, "api", "--redis-url", redis_url, "--port", str(free_port())],
                          env={**base, **env}, capture_output=True, text=True, timeout=60)
    assert proc.returncode == EXIT_USAGE
    assert proc.stderr.startswith(f"antre api: {message}") and proc.stderr.count("\n") == 1


def test_no_auth_listens_on_loopback_only(redis_url: str, tmp_path: Path) -> None:
    port = free_port()
    env = {k: v for k, v in child_env().items() if k not in ("ANTRE_API_TOKEN", "ANTRE_API_HOST")}
    log_path = tmp_path / "api.log"
    with log_path.open("w") as log_file:
        proc = subprocess.Popen([ANTRE, "api", "--no-auth", "--redis-url", redis_url, "--port",
                                 str(port)], env=env, stdout=subprocess.DEVNULL, stderr=log_file,
                                text=True)
    try:
        wait_until(lambda: _answers("127.0.0.1", port), timeout_s=20, message="API up")
        # The port answers a moment before the start is logged: a SIGTERM in between would end
        # the process before its log line, so wait for the line, not only the port.
        wait_until(lambda: "api listening" in log_path.read_text(), timeout_s=20,
                   message="the start logged")
        # A page whose DNS name rebinds to 127.0.0.1 reaches a loopback port from the browser,
        # with its own name in Host: refused. Loopback names with any port are served.
        for host, expected in (("rebind.attacker.example", 403), (f"rebind.example:{port}", 403),
                               ("localhost", 200), (f"LOCALHOST.:{port}", 200),
                               (f"127.0.0.1:{port}", 200),
                               (f"[::1]:{port}", 200)):
            status, body = _get("127.0.0.1", port, "/v1/queues/default/stats", host=host)
            assert status == expected, (host, status, body)
            if expected == 403:
                assert json.loads(body)["error"] == "host_not_allowed"
    finally:
        proc.terminate()
        proc.wait(timeout=30)
    stderr = log_path.read_text()
    lines = [json.loads(line) for line in stderr.splitlines() if line.startswith("{")]
    listening = next(line for line in lines if line["msg"] == "api listening")
    assert listening["addresses"] == [f"127.0.0.1:{port}"]
    assert any("without authentication" in line["msg"] for line in lines)


@pytest.mark.parametrize("address", ["127.0.0.2", "127.1.2.3"])
def test_no_auth_on_any_loopback_address_checks_the_host(redis_url: str, tmp_path: Path,
                                                         address: str) -> None:
    """All of 127.0.0.0/8 is loopback: a rebinding page reaches 127.0.0.2 as well."""
    port = free_port()
    env = {k: v for k, v in child_env().items() if k not in ("ANTRE_API_TOKEN", "ANTRE_API_HOST")}
    log_path = tmp_path / "api.log"
    with log_path.open("w") as log_file:
        proc = subprocess.Popen([ANTRE, "api", "--no-auth", "--host", address, "--redis-url",
                                 redis_url, "--port", str(port)], env=env,
                                stdout=subprocess.DEVNULL, stderr=log_file, text=True)
    try:
        wait_until(lambda: "api listening" in log_path.read_text() or proc.poll() is not None,
                   timeout_s=30, message="the API started")
        assert proc.poll() is None, log_path.read_text()
        for host, expected in (("attacker.example", 403), (f"attacker.example:{port}", 403),
                               (f"{address}:{port}", 200), ("localhost", 200),
                               (f"127.0.0.1:{port}", 200), (f"[::1]:{port}", 200)):
            status, body = _get(address, port, "/v1/queues/default/stats", host=host)
            assert status == expected, (host, status, body)
    finally:
        proc.terminate()
        proc.wait(timeout=30)


async def test_the_name_an_anonymous_api_listens_on_is_answered_too(redis_url: str) -> None:
    """A second read: listening on a machine's own name (127.0.1.1 on Debian) turned the Host
    check on, and then refused requests addressed by that very name. It is answered; a
    rebinding page's own name is not."""
    async with api_client_for(redis_url, local_hosts_only=True, listen_name="box") as client:
        for host, expected in (("box", 200), ("BOX.:8080", 200), ("localhost", 200),
                               ("attacker.example", 403), ("box.attacker.example", 403)):
            answer = await client.get("/v1/queues/default/stats", headers={"Host": host})
            assert answer.status == expected, (host, answer.status)


@pytest.mark.parametrize(("host", "loopback_only"), [
    ("127.0.0.1", True), ("127.0.0.2", True), ("127.255.255.254", True), ("::1", True),
    ("localhost", True), ("0.0.0.0", False), ("::", False), ("10.1.2.3", False),
    ("192.0.2.1", False),
])
def test_which_listen_hosts_are_loopback(host: str, loopback_only: bool) -> None:
    assert loopback.listens_on_loopback(host) is loopback_only


def _get(address: str, port: int, path: str, *, host: str) -> tuple[int, str]:
    connection = http.client.HTTPConnection(address, port, timeout=10)
    try:
        connection.putrequest("GET", path, skip_host=True)
        connection.putheader("Host", host)
        connection.endheaders()
        response = connection.getresponse()
        return response.status, response.read().decode()
    finally:
        connection.close()


def _answers(host: str, port: int) -> bool:
    try:
        with socket.create_connection((host, port), timeout=1):
            return True
    except OSError:
        return False


async def test_a_token_for_one_queue_cannot_touch_another(redis_client: Any, redis_url: str) -> None:
    other = Queue(redis_client, "billing")
    dead_id = other.enqueue("t", max_attempts=1).job_id
    async with api_client_for(redis_url, token=TOKEN, queues=("emails",)) as client:
        assert (await client.post("/v1/queues/emails/jobs", json={"type": "t"},
                                  headers=AUTH)).status == 202
        for method, path, body in [
            ("POST", "/v1/queues/billing/jobs", {"type": "t"}),
            ("GET", f"/v1/queues/billing/jobs/{dead_id}", None),
            ("GET", "/v1/queues/billing/stats", None),
            ("GET", "/v1/queues/billing/dead", None),
            ("POST", "/v1/queues/billing/dead/replay", {"all": True}),
        ]:
            response = await client.request(method, path, json=body, headers=AUTH)
            assert response.status == 403, path
            answer = await response.json()
            assert (answer["error"], answer["field"]) == ("queue_not_served", "queue")
            assert "it serves 'emails'" in answer["message"]
        metrics = await (await client.get("/metrics")).text()
    assert other.stats().ready == 1  # nothing enqueued by the refused POST
    assert 'queue="emails"' in metrics and "billing" not in metrics


async def test_metrics_behind_the_token_when_asked(redis_client: Any, redis_url: str) -> None:
    async with api_client_for(redis_url, token=TOKEN, metrics_auth=True) as client:
        assert (await client.get("/metrics")).status == 401
        assert (await client.get("/metrics", headers=AUTH)).status == 200
        assert (await client.get("/healthz")).status == 200


@pytest.mark.parametrize("value", ["yes", "on", "TRUE", "1"])
def test_metrics_auth_from_the_env_guards_metrics(redis_url: str, tmp_path: Path,
                                                  value: str) -> None:
    """Every spelling of "true" the other switches take puts /metrics behind the token."""
    port = free_port()
    env = {**child_env(), "ANTRE_API_TOKEN": TOKEN, "ANTRE_API_METRICS_AUTH": value}
    log_path = tmp_path / "api.log"
    with log_path.open("w") as log_file:
        proc = subprocess.Popen([ANTRE, "api", "--redis-url", redis_url, "--host", "127.0.0.1",
                                 "--port", str(port)], env=env, stdout=subprocess.DEVNULL,
                                stderr=log_file, text=True)
    try:
        wait_until(lambda: "api listening" in log_path.read_text() or proc.poll() is not None,
                   timeout_s=30, message="the API started")
        assert proc.poll() is None, log_path.read_text()
        assert _get("127.0.0.1", port, "/metrics", host="localhost")[0] == 401
    finally:
        proc.terminate()
        proc.wait(timeout=30)


@pytest.mark.parametrize("value", ["maybe", "ture", "2"])
def test_a_bad_metrics_auth_value_stops_the_start(redis_url: str, value: str) -> None:
    """Fail closed: a typo must not leave /metrics open."""
    env = {**child_env(), "ANTRE_API_TOKEN": TOKEN, "ANTRE_API_METRICS_AUTH": value}
    proc = subprocess.run([ANTRE, "api", "--redis-url", redis_url, "--port", str(free_port())],
                          env=env, capture_output=True, text=True, timeout=60)
    assert proc.returncode == EXIT_USAGE
    assert proc.stderr == (f"antre api: ANTRE_API_METRICS_AUTH: got {value!r}; must be true or "
                           "false\n")


def _raw_request(port: int, payload: bytes) -> socket.socket:
    sock = socket.create_connection(("127.0.0.1", port), timeout=10)
    sock.sendall(payload)
    return sock


def _read_all(sock: socket.socket) -> bytes:
    chunks = []
    while chunk := sock.recv(65536):
        chunks.append(chunk)
    return b"".join(chunks)


def test_a_stalled_body_gets_408_and_the_connection_closes(redis_client: Any,
                                                          redis_url: str) -> None:
    with running_api(redis_url, token=TOKEN, body_timeout_s=0.5) as base_url:
        port = int(base_url.rsplit(":", 1)[1])
        head = (f"POST /v1/queues/q/jobs HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {TOKEN}\r\n"
                "Content-Type: application/json\r\nContent-Length: 100\r\n\r\n{\"type\"")
        began = time.monotonic()
        with _raw_request(port, head.encode()) as sock:
            answer = _read_all(sock)  # returns once the server closed the connection
        waited = time.monotonic() - began
    assert answer.startswith(b"HTTP/1.1 408"), answer[:200]
    assert b'"error": "body_timeout"' in answer
    assert 0.4 < waited < 5
    assert Queue(redis_client, "q").stats().ready == 0


def test_a_client_that_leaves_mid_body_is_no_server_error(redis_client: Any, redis_url: str,
                                                         caplog: pytest.LogCaptureFixture) -> None:
    """Review finding: it was logged as an unhandled error with a traceback and counted as a
    500. It is counted under 499 (client closed request) and logged as nothing at all."""
    caplog.set_level(logging.INFO, logger="antre")
    with running_api(redis_url, token=TOKEN) as base_url:
        port = int(base_url.rsplit(":", 1)[1])
        head = (f"POST /v1/queues/q/jobs HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {TOKEN}\r\n"
                "Content-Type: application/json\r\nContent-Length: 100\r\n\r\n{\"type\"")
        with _raw_request(port, head.encode()):
            pass  # closed with 90 bytes of the body still to come

        def counted() -> bool:
            request = urllib.request.Request(f"{base_url}/metrics",
                                             headers={"Authorization": f"Bearer {TOKEN}"})
            with urllib.request.urlopen(request, timeout=10) as answer:
                return 'status="499"' in answer.read().decode()

        wait_until(counted, timeout_s=10, message="the request counted under 499")
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING], caplog.text
    assert Queue(redis_client, "q").stats().ready == 0


def test_connections_over_the_cap_get_503_at_once(redis_url: str) -> None:
    with running_api(redis_url, token=TOKEN, max_connections=2) as base_url:
        port = int(base_url.rsplit(":", 1)[1])
        idle = [socket.create_connection(("127.0.0.1", port), timeout=10) for _ in range(2)]
        try:
            wait_until(lambda: _status(port) == 503, timeout_s=10,
                       message="a third connection is refused while two are open")
            with _raw_request(port, b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n") as sock:
                answer = _read_all(sock)
            assert answer.startswith(b"HTTP/1.1 503") and b"Retry-After: 1" in answer
            assert b"too_many_connections" in answer
        finally:
            for sock in idle:
                sock.close()
        wait_until(lambda: _status(port) == 200, timeout_s=10,
                   message="served again once the idle connections closed")


def _status(port: int) -> int:
    with _raw_request(port, b"GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n") as sock:
        return int(_read_all(sock).split(b" ", 2)[1])


@pytest.mark.parametrize("name", ["q\n", "q\r\n", "emails\n"])
def test_names_with_a_trailing_newline_are_refused(name: str) -> None:
    with pytest.raises(errors.InvalidArgument):
        keys.validate_queue_name(name)
    with pytest.raises(errors.InvalidArgument):
        keys.validate_prefix("antre" + name[1:])


async def test_trailing_newlines_in_the_api_are_400(redis_client: Any, redis_url: str) -> None:
    async with api_client_for(redis_url, token=TOKEN,
                              queues=("q",)) as client:
        response = await client.post("/v1/queues/q%0A/jobs", json={"type": "t"}, headers=AUTH)
        assert response.status == 400 and (await response.json())["field"] == "queue"
        response = await client.post("/v1/queues/q/jobs", json={"type": "t\n"}, headers=AUTH)
        assert response.status == 400 and (await response.json())["field"] == "type"
    assert redis_client.dbsize() == 0

