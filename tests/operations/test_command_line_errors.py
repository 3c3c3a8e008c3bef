"""Errors of the installed commands, each run as a user would (a subprocess): one line on
stderr naming what is wrong and what to do, a non-zero exit status, no traceback.

Covers: a taken ``--metrics-port`` (worker) and ``--port`` (api); a cluster URL pointed at a
single server; ``rediss://`` against a plain-text server (a TLS hint); ``antre-operator``
without Kubernetes credentials; a handler module whose own import fails or raises (file and
line named); a missing handler module; ``--handlers a,b``; ``dlq replay`` of unknown ids and
without ids (one prefix); URLs shown without their password.
"""

from __future__ import annotations

import contextlib
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from antre import Queue
from antre.commands import EXIT_NOT_FOUND, EXIT_UNAVAILABLE, EXIT_USAGE
from redis_servers import child_env, free_port, wait_until

#: The console scripts installed beside the interpreter running the tests.
BIN = Path(sys.executable).parent
ANTRE = [str(BIN / "antre")]
OPERATOR = str(BIN / "antre-operator")


def run(*args: str, env: dict[str, str] | None = None, cwd: Path | None = None,
        timeout_s: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run(list(args), capture_output=True, text=True, timeout=timeout_s,
                          env={**child_env(), **(env or {})}, cwd=cwd, check=False)


def assert_one_line(proc: subprocess.CompletedProcess[str], code: int, *parts: str) -> None:
    assert "Traceback" not in proc.stderr, proc.stderr
    assert proc.returncode == code, proc.stderr
    assert proc.stderr.count("\n") == 1, proc.stderr
    for part in parts:
        assert part in proc.stderr, proc.stderr


@contextlib.contextmanager
def port_taken() -> Iterator[int]:
    with socket.socket() as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(("0.0.0.0", 0))
        sock.listen()
        yield sock.getsockname()[1]


def test_worker_metrics_port_taken(redis_url: str) -> None:
    with port_taken() as port:
        proc = run(*ANTRE, "worker", "--handlers", "antre.example_handlers", "--redis-url",
                   redis_url, "--metrics-port", str(port), "--log-level", "ERROR")
    assert_one_line(proc, EXIT_UNAVAILABLE, f"antre worker: --metrics-port {port}: cannot listen",
                    "Address already in use")


def test_api_port_taken(redis_url: str) -> None:
    with port_taken() as port:
        proc = run(*ANTRE, "api", "--redis-url", redis_url, "--port", str(port),
                   "--log-level", "ERROR", env={"ANTRE_API_TOKEN": "t0ken"})
    assert_one_line(proc, EXIT_UNAVAILABLE, f"antre api: --port {port}: cannot listen",
                    "Address already in use")


def test_cluster_url_at_a_single_server(redis_url: str) -> None:
    url = redis_url.replace("redis://", "redis+cluster://")
    proc = run(*ANTRE, "stats", "--redis-url", url)
    assert_one_line(proc, EXIT_UNAVAILABLE, "is not a Redis Cluster", "use redis://")


def test_tls_url_at_a_plain_text_server(redis_url: str) -> None:
    # socket_timeout in the URL keeps the wait short; without it the handshake waits 15 s.
    url = redis_url.replace("redis://", "rediss://") + "?socket_timeout=1"
    proc = run(*ANTRE, "stats", "--redis-url", url)
    assert_one_line(proc, EXIT_UNAVAILABLE, "is unreachable", "rediss:// speaks TLS",
                    "use redis://")


def test_operator_without_kubernetes_credentials(tmp_path: Path) -> None:
    env = {"HOME": str(tmp_path), "KUBECONFIG": str(tmp_path / "missing"),
           "KUBERNETES_SERVICE_HOST": ""}
    proc = run(OPERATOR, "--namespace", "team-a", env=env)
    assert_one_line(proc, EXIT_USAGE, "antre-operator: no Kubernetes credentials",
                    "KUBECONFIG")


def test_handler_module_whose_import_fails(tmp_path: Path, redis_url: str) -> None:
    (tmp_path / "broken_jobs.py").write_text(
        "import antre\n\nimport not_installed_dependency  # line 3\n")
    proc = run(*ANTRE, "worker", "--handlers", "broken_jobs", "--redis-url", redis_url,
               cwd=tmp_path)
    assert_one_line(proc, EXIT_USAGE, "handlers module 'broken_jobs': its import of "
                    "'not_installed_dependency' failed at", "broken_jobs.py:3")


def test_handler_module_that_raises(tmp_path: Path, redis_url: str) -> None:
    (tmp_path / "raising_jobs.py").write_text("SETTINGS = {}\nTOKEN = SETTINGS['token']\n")
    proc = run(*ANTRE, "worker", "--handlers", "raising_jobs", "--redis-url", redis_url,
               cwd=tmp_path)
    assert_one_line(proc, EXIT_USAGE, "raising_jobs.py:2: KeyError: 'token'")


def test_missing_handler_module_is_named(redis_url: str) -> None:
    proc = run(*ANTRE, "worker", "--handlers", "no_such_module_here", "--redis-url", redis_url)
    assert_one_line(proc, EXIT_USAGE, "handlers module 'no_such_module_here': not importable")


def test_handlers_flag_takes_a_comma_list(tmp_path: Path, redis_client: object,
                                          redis_url: str) -> None:
    (tmp_path / "first_jobs.py").write_text(
        "import antre\n\n@antre.handler('first')\nasync def first(job):\n    pass\n")
    (tmp_path / "second_jobs.py").write_text(
        "import antre\n\n@antre.handler('second')\ndef second(job):\n    pass\n")
    queue = Queue(redis_client, "commas")
    ids = [queue.enqueue("first").job_id, queue.enqueue("second").job_id]
    worker = subprocess.Popen(
        [*ANTRE, "worker", "--handlers", "first_jobs,second_jobs", "--redis-url", redis_url,
         "--queue", "commas"], cwd=tmp_path, env=child_env(), stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE, text=True)
    try:
        wait_until(lambda: [queue.get(i).status for i in ids] == ["done", "done"], timeout_s=20,
                   message="both handler modules of --handlers a,b ran their job")
    finally:
        worker.terminate()
        _, stderr = worker.communicate(timeout=30)
    assert worker.returncode == 0, stderr


def test_dlq_replay_of_unknown_ids(redis_client: object, redis_url: str) -> None:
    queue = Queue(redis_client, "dlq")
    live = queue.enqueue("t").job_id
    proc = run(*ANTRE, "dlq", "replay", "nope-1", live, "--redis-url", redis_url,
               "--queue", "dlq")
    assert proc.stdout == "replayed 0 job(s)\n"
    assert_one_line(proc, EXIT_NOT_FOUND, "antre dlq: not in the dead-letter list",
                    f"nope-1, {live}")


def test_dlq_replay_without_ids_has_one_prefix(redis_url: str) -> None:
    proc = run(*ANTRE, "dlq", "replay", "--redis-url", redis_url)
    assert_one_line(proc, EXIT_USAGE, "antre dlq: give job ids, or --all")
    assert proc.stderr.count("dlq") == 1


@pytest.mark.parametrize("stdin_errors", ["strict", "surrogateescape"])
def test_enqueue_of_a_payload_on_standard_input_that_is_not_utf8(redis_client: object,
                                                                 redis_url: str,
                                                                 stdin_errors: str) -> None:
    """JSON is UTF-8 text. Before: where Python decodes standard input strictly (a UTF-8 locale
    such as en_US.UTF-8, or macOS; PYTHONIOENCODING stands in for it here), a byte that is not
    UTF-8 ended ``antre enqueue t -`` with a UnicodeDecodeError traceback."""
    proc = subprocess.run([*ANTRE, "enqueue", "t", "-", "--redis-url", redis_url],
                          input=b'{"note": "caf\xe9"}', capture_output=True, timeout=60,
                          env={**child_env(), "PYTHONIOENCODING": f"utf-8:{stdin_errors}"},
                          check=False)
    assert proc.stderr.decode() == ("antre enqueue: payload: standard input is not UTF-8 text "
                                    "(byte 0xe9 at position 13); JSON must be UTF-8\n")
    assert (proc.returncode, proc.stdout) == (EXIT_USAGE, b"")
    assert Queue(redis_client).stats().ready == 0


def test_dlq_list_with_a_limit_past_what_redis_indexes(redis_client: object,
                                                      redis_url: str) -> None:
    """Before: ``--limit 100000000000000000000`` (an integer >= 1, as the command asks) exited
    69 with "Redis refused the command: value is not an integer or out of range"."""
    queue = Queue(redis_client, "dlq")
    queue.enqueue("t")
    proc = run(*ANTRE, "dlq", "list", "--limit", str(10**20), "--redis-url", redis_url,
               "--queue", "dlq")
    assert (proc.returncode, proc.stdout, proc.stderr) == (0, "", "0 dead job(s) shown\n")


@pytest.mark.parametrize("scheme", ["redis", "rediss"])
def test_messages_name_the_url_without_its_password(scheme: str) -> None:
    port = free_port()
    proc = run(*ANTRE, "stats", "--redis-url", f"{scheme}://:hunter2@127.0.0.1:{port}/0")
    assert_one_line(proc, EXIT_UNAVAILABLE, f"{scheme}://:***@127.0.0.1:{port}/0")
    assert "hunter2" not in proc.stderr
