"""The registry of queue names the dashboard lists (``<prefix>:queues``, a Set).

Covers: a producer (sync and asyncio) registers its queue once per client, before its first
enqueue; a worker registers on start; a Redis user that may not write the registry still
enqueues (registration is retried on the next enqueue); invalid names in the Set are skipped
when listing; prefixes keep separate registries.
"""

from __future__ import annotations

from typing import Any

import pytest
import redis
from antre import keys, queue_registry
from antre.client import AsyncQueue, Queue
from antre.handlers import HandlerRegistry
from antre.settings import QueueSettings
from invariants import read_record
from worker_harness import eventually, running_worker


def test_sync_producer_registers_once(redis_client: Any) -> None:
    queue = Queue(redis_client, "emails")
    assert redis_client.smembers(keys.queue_registry()) == set()
    queue.enqueue("t", {})
    queue.enqueue_many([("t", {}), ("t", {})])
    assert redis_client.smembers(keys.queue_registry()) == {"emails"}
    before = redis_client.info("commandstats").get("cmdstat_sadd", {}).get("calls", 0)
    queue.enqueue("t", {})
    after = redis_client.info("commandstats").get("cmdstat_sadd", {}).get("calls", 0)
    assert after == before  # registered already: no extra command per enqueue


async def test_async_producer_and_prefixes(redis_client: Any, aredis: Any) -> None:
    await AsyncQueue(aredis, "reports", prefix="other").enqueue("t", {})
    await AsyncQueue(aredis, "emails").enqueue_many([("t", {})])
    assert await queue_registry.registered_queues(aredis, "antre") == ["emails"]
    assert await queue_registry.registered_queues(aredis, "other") == ["reports"]


async def test_worker_registers_on_start(redis_client: Any, aredis: Any) -> None:
    qs = QueueSettings(name="idle-workers")
    async with running_worker(aredis, qs, HandlerRegistry()):
        await eventually(lambda: redis_client.sismember(keys.queue_registry(), "idle-workers"),
                         message="the worker's queue in the registry")


async def test_names_that_are_not_queue_names_are_skipped(redis_client: Any, aredis: Any) -> None:
    redis_client.sadd(keys.queue_registry(), "ok", "not a queue", "{x}")
    assert await queue_registry.registered_queues(aredis, "antre") == ["ok"]


def test_a_user_without_the_registry_still_enqueues(redis_client: Any, redis_url: str) -> None:
    # A Redis user allowed every command except SADD: the enqueue succeeds, the registry stays
    # empty, and the next enqueue tries again (one SADD per attempt, not per job).
    redis_client.acl_setuser("producer", enabled=True, passwords=["+pw"], keys=["*"],
                             commands=["+@all", "-sadd"])
    try:
        limited = redis.Redis.from_url(redis_url, username="producer", password="pw",
                                       decode_responses=True)
        queue = Queue(limited, "limited")
        job = queue.enqueue("t", {})
        assert read_record(limited, queue, job.job_id)["status"] == "queued"
        assert redis_client.smembers(keys.queue_registry()) == set()
        assert queue._registered is False
        limited.close()
    finally:
        redis_client.acl_deluser("producer")


@pytest.mark.parametrize("prefix", ["", "bad prefix"])
def test_registry_key_validates_the_prefix(prefix: str) -> None:
    with pytest.raises(ValueError, match="prefix"):
        keys.queue_registry(prefix)
