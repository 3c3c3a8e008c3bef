"""Real redis-server processes for the tests, each on a free port of its own.

Never the shared server on 6379: every test server is started here, killed here, and lives in
a temporary directory. Fault tests use ``RedisServer.kill()`` / ``restart()``.
"""

from __future__ import annotations

import asyncio
import contextlib
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
                 appendfsync: str = "everysec") -> None:
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
        binary = shutil.which("redis-server")
        if binary is None:
            raise RuntimeError("redis-server is not on PATH; the tests need a real Redis")
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
