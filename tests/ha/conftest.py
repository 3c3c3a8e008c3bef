"""Fixtures of the high-availability tests: a real Sentinel group per test (one primary, two
replicas, three Sentinels; :mod:`redis_sentinels`), and ``antre worker`` subprocesses pointed
at it whose handlers (:mod:`fault_handlers`) leave their traces in the session's plain
redis-server, which no failover touches."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fault_support import SpawnWorker, worker_spawner
from redis_sentinels import SentinelGroup, sentinel_group
from redis_servers import RedisServer


@pytest.fixture
def sentinels() -> Iterator[SentinelGroup]:
    with sentinel_group() as group:
        yield group


@pytest.fixture
def spawn_worker(sentinels: SentinelGroup, redis_server: RedisServer, redis_client: Any,
                 tmp_path: Path) -> Iterator[SpawnWorker]:
    """Starts ``antre worker`` subprocesses on the group's ``redis+sentinel://`` URL; their
    traces go to the (flushed) session server."""
    with worker_spawner(redis_url=sentinels.url(), effects_url=redis_server.url,
                        log_dir=tmp_path) as spawn:
        yield spawn
