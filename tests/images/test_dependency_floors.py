"""antre at the lowest versions pyproject.toml allows: a user whose other pins hold every
runtime dependency at its floor gets a working install.

Aspects: each runtime dependency of the base package has a ``>=`` floor (read from
pyproject.toml, so this test follows the file); a fresh virtualenv gets exactly those versions
from PyPI, wheels only (a floor that installs only by compiling from source is no floor), with
what they need in turn at whatever pip resolves today, and antre itself with ``--no-deps``,
built from the files a Docker build context holds; ``pip check`` agrees. Then, from that
virtualenv and against a real redis-server: the sync client enqueues and reads a job back (its
pinned connection, on redis-py's own methods where the floor lacks the internals it drives
directly), the asyncio client does the same, ``antre demo`` works 100 jobs off with a real
worker (retries, resource locks, two dead-lettered), and ``antre api --dashboard`` answers
the stats, the metrics and a dashboard page rendered from its templates. A URL option the
floor's asyncio client does not take (``ssl_password``, before 7.2) stops ``antre worker`` at
start with one line and exit 2, where redis-py's TypeError came at the first command; the sync
client still takes it; what antre finds each client takes is what its table says of 5.0.1.

Needs PyPI, as test_install.py does; pip's cache makes a second run quick.
"""

from __future__ import annotations

import json
import subprocess
import tomllib
import urllib.request
from pathlib import Path

import pytest
import redis_py_table
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version
from redis_servers import wait_until

from .dockerfiles import build_context
from .virtualenvs import TIMEOUT_S, new_venv, pip, run, serving_api, user_env

REPO_ROOT = Path(__file__).resolve().parents[2]
PYPROJECT = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text())
#: One process builds the virtualenv and runs every test here (scripts/test.sh: loadgroup).
pytestmark = pytest.mark.xdist_group("dependency-floors")

#: Run by the floor virtualenv's Python: both clients against the URL given as argv[1].
CLIENTS_ROUND = """
import asyncio, sys
import antre

url = sys.argv[1]
queue = antre.Queue.from_url(url, "floors")
job = queue.enqueue("send_email", {"to": "sync@example.com"})
assert queue.get(job.job_id).payload == {"to": "sync@example.com"}, "sync read back"
queue.close()

async def main():
    aqueue = antre.AsyncQueue.from_url(url, "floors")
    job = await aqueue.enqueue("send_email", {"to": "async@example.com"})
    assert (await aqueue.get(job.job_id)).payload == {"to": "async@example.com"}, "async read back"
    print("ready:", (await aqueue.stats()).ready)
    await aqueue.close()

asyncio.run(main())
"""


def floors() -> list[str]:
    """``name[extras]==floor`` for each runtime dependency of the base package."""
    pins = []
    for line in PYPROJECT["project"]["dependencies"]:
        req = Requirement(line)
        lowest = [spec.version for spec in req.specifier if spec.operator == ">="]
        assert len(lowest) == 1, f"pyproject.toml: {line!r} states no single >= floor"
        extras = f"[{','.join(sorted(req.extras))}]" if req.extras else ""
        pins.append(f"{req.name}{extras}=={lowest[0]}")
    return pins


@pytest.fixture(scope="module")
def floor_venv(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("floors")
    python = new_venv(root / "venv")
    pip("--python", python, "install", "--only-binary=:all:", "--no-compile", *floors())
    context = root / "context"
    build_context(REPO_ROOT, context)
    if not (context / "README.md").exists():
        (context / "README.md").write_text("antre\n")  # pyproject's readme
    pip("--python", python, "install", "--no-deps", "--no-compile", context)
    return root / "venv"


def test_the_floors_are_what_got_installed(floor_venv: Path) -> None:
    python = floor_venv / "bin" / "python"
    installed = {canonicalize_name(name): Version(version) for name, version in (
        line.split("==") for line in pip("--python", python, "list", "--format=freeze").split())}
    for pin in map(Requirement, floors()):
        (floor,) = pin.specifier
        assert installed.get(canonicalize_name(pin.name)) == Version(floor.version), pin
    assert "No broken requirements found" in pip("--python", python, "check")


def test_both_clients_enqueue_and_read_back(floor_venv: Path, redis_url: str,
                                            tmp_path: Path) -> None:
    out = run(floor_venv / "bin" / "python", "-c", CLIENTS_ROUND, redis_url, env=user_env(),
              cwd=tmp_path)
    assert "ready: 2" in out


def test_a_worker_works_the_demo_off(floor_venv: Path, redis_url: str, tmp_path: Path) -> None:
    out = run(floor_venv / "bin" / "antre", "demo", "--redis-url", redis_url, "--jobs", "100",
              env=user_env(), cwd=tmp_path)
    [final] = [line for line in out.splitlines() if line.startswith("final stats:")]
    assert "'done': 98, 'dead': 2" in final, out  # every 10th is a report, 2 of them broken


def test_the_api_serves_stats_metrics_and_the_dashboard(floor_venv: Path, redis_url: str,
                                                        tmp_path: Path) -> None:
    with serving_api(floor_venv, redis_url, "floors", tmp_path) as (base, process):

        def get(path: str) -> str:
            with urllib.request.urlopen(base + path, timeout=5) as response:
                assert response.status == 200, path
                return str(response.read().decode())

        wait_until(lambda: get("/healthz"), timeout_s=30, message="antre api on the floors")
        assert json.loads(get("/v1/queues/floors/stats"))["queue"] == "floors"
        assert "antre_api_requests_total" in get("/metrics")
        page = get("/ui/")
        assert "<h1>Queues</h1>" in page and 'data-queue="floors"' in page
    _, stderr = process.communicate(timeout=TIMEOUT_S)
    assert "Traceback" not in stderr, stderr



#: Run by the floor virtualenv's Python: the sync client against a server that answers every
#: command with a map whose key is an array, 12 bytes no Redis sends.
HOSTILE_REPLY_ROUND = """
import socket, threading, antre

server = socket.create_server(("127.0.0.1", 0))

def answer():
    connection, _ = server.accept()
    while connection.recv(65536):
        connection.sendall(b"%1\\r\\n*0\\r\\n*0\\r\\n")

threading.Thread(target=answer, daemon=True).start()
queue = antre.Queue.from_url(f"redis://127.0.0.1:{server.getsockname()[1]}/0", "floors")
try:
    queue.stats()
except Exception as exc:
    print("failed:", type(exc).__name__)
"""


def test_a_reply_no_redis_sends_fails_the_call_not_the_process(floor_venv: Path,
                                                                tmp_path: Path) -> None:
    """hiredis before 3.2.0 crashed the process (SIGSEGV) on this reply: an operator reading
    the Redis a JobQueue author names would stop for every JobQueue."""
    out = run(floor_venv / "bin" / "python", "-c", HOSTILE_REPLY_ROUND, env=user_env(),
              cwd=tmp_path)
    assert out.startswith("failed: "), out


#: Run by the floor virtualenv's Python after tests/redis_py_table.py's text.
OPTIONS_ROUND = """
import antre, antre.errors
url = "rediss://127.0.0.1:1/0?ssl_password=x"
antre.Queue.from_url(url, "floors").close()  # the sync connections take it
try:
    antre.AsyncQueue.from_url(url, "floors")
except antre.errors.InvalidArgument as exc:
    print("refused:", exc)
print("disagreements:", disagreements())
"""


def test_an_option_the_floor_does_not_take_stops_the_worker_at_start(floor_venv: Path,
                                                                     tmp_path: Path) -> None:
    """Before: the worker started, and its first command raised redis-py's TypeError."""
    proc = subprocess.run(
        [floor_venv / "bin" / "antre", "worker", "--handlers", "antre.example_handlers",
         "--redis-url", "rediss://127.0.0.1:1/0?ssl_password=x"],
        capture_output=True, text=True, env=user_env(), cwd=tmp_path, timeout=60, check=False)
    said = ("redis url: ssl_password needs redis-py 7.2 or later (installed: 5.0.1) for the "
            "asyncio client, which the worker, the API and antre.AsyncQueue use; upgrade redis "
            "or remove the parameter")
    assert (proc.returncode, proc.stderr) == (2, f"antre worker: {said}\n"), proc.stderr
    out = run(floor_venv / "bin" / "python", "-c",
              Path(redis_py_table.__file__).read_text() + OPTIONS_ROUND, env=user_env(),
              cwd=tmp_path)
    assert out.splitlines() == [f"refused: {said}", "disagreements: []"], out


def test_a_tls_cluster_on_the_floor_is_refused_by_the_sync_client(floor_venv: Path,
                                                                  tmp_path: Path) -> None:
    """Before 6.1 the sync cluster client dropped ``ssl_check_hostname`` without a word and took
    a certificate issued for any host; the command line (the sync client) now refuses."""
    url = "rediss+cluster://127.0.0.1:1"
    proc = subprocess.run([floor_venv / "bin" / "antre", "stats", "--redis-url", url],
                          capture_output=True, text=True, env=user_env(), cwd=tmp_path,
                          timeout=60, check=False)
    assert (proc.returncode, proc.stderr) == (2, (
        f"antre stats: redis url {url!r}: a TLS cluster needs redis-py 6.1 or later (installed: "
        "5.0.1) for antre.Queue and the command line: earlier releases do not check that a "
        "server's certificate names it; upgrade redis\n")), proc.stderr
