"""Fixtures for the fault tests: a killable redis-server per test and real ``antre worker``
subprocesses that the tests SIGKILL, SIGSTOP, SIGCONT and SIGTERM.

Workers import :mod:`fault_handlers` from this directory (it is put on their PYTHONPATH), log JSON
lines to a file per worker, and are all killed at teardown, whatever state the test left them in.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis
from antre import QueueSettings
from fault_support import QUEUE, SpawnWorker, WorkerProcess
from redis_servers import RedisServer, child_env

HERE = Path(__file__).parent


@pytest.fixture
def fault_redis(request: pytest.FixtureRequest) -> Iterator[RedisServer]:
    """A redis-server of this test's own, so it can be killed and restarted. Durable by default
    (append-only file, fsync on every write); indirect parametrisation may pass other
    ``RedisServer`` keyword arguments."""
    options = {"appendonly": True, "appendfsync": "always", **getattr(request, "param", {})}
    server = RedisServer("--maxmemory-policy", "noeviction", **options)
    server.start()
    yield server
    server.stop()


@pytest.fixture
def fault_client(fault_redis: RedisServer) -> Iterator[redis.Redis]:
    client = redis.Redis.from_url(fault_redis.url, decode_responses=True)
    yield client
    client.close()


@pytest.fixture
def queue_settings() -> QueueSettings:
    return QueueSettings(name=QUEUE)


@pytest.fixture
def spawn_worker(fault_redis: RedisServer, tmp_path: Path) -> Iterator[SpawnWorker]:
    """Starts ``antre worker`` subprocesses; every one still running is killed at teardown."""
    spawned: list[WorkerProcess] = []

    def spawn(name: str, *, concurrency: int = 4, visibility_timeout_s: float = 1.0,
              grace_period_s: float = 5.0, reaper_interval_s: float = 0.2,
              backoff_base_s: float = 0.05, backoff_max_s: float = 0.2,
              redis_url: str | None = None, wait_started: bool = True) -> WorkerProcess:
        env = child_env()
        env["PYTHONPATH"] = os.pathsep.join(
            p for p in (str(HERE), env.get("PYTHONPATH", "")) if p)
        env["FAULT_WORKER_NAME"] = name
        env["FAULT_EFFECTS_URL"] = fault_redis.url
        log_path = tmp_path / f"worker-{name}-{len(spawned)}.log"
        command = [
            sys.executable, "-m", "antre", "worker", "--handlers", "fault_handlers",
            "--redis-url", redis_url or fault_redis.url, "--queue", QUEUE,
            "--concurrency", str(concurrency), "--visibility-timeout", str(visibility_timeout_s),
            "--grace-period", str(grace_period_s), "--reaper-interval", str(reaper_interval_s),
            "--backoff-base", str(backoff_base_s), "--backoff-max", str(backoff_max_s),
        ]
        with log_path.open("wb") as log_file:
            process = subprocess.Popen(command, env=env, stdout=log_file, stderr=subprocess.STDOUT,
                                       cwd=tmp_path)
        worker = WorkerProcess(name, process, log_path)
        spawned.append(worker)
        if wait_started:
            worker.worker_id()
        return worker

    yield spawn
    for worker in spawned:
        worker.kill()
