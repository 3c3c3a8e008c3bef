"""Fixtures for the fault tests: a killable redis-server per test and real ``antre worker``
subprocesses that the tests SIGKILL, SIGSTOP, SIGCONT and SIGTERM.

Workers import :mod:`fault_handlers` from this directory (it is put on their PYTHONPATH), log JSON
lines to a file per worker, and are all killed at teardown, whatever state the test left them in.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
import redis
from antre import QueueSettings
from fault_support import QUEUE, SpawnWorker, worker_spawner
from redis_servers import RedisServer


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
    """Starts ``antre worker`` subprocesses on the test's server (traces there too)."""
    with worker_spawner(redis_url=fault_redis.url, effects_url=fault_redis.url,
                        log_dir=tmp_path) as spawn:
        yield spawn
