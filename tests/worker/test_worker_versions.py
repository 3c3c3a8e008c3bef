"""A worker of this version in the registry (PROTOCOL.md "Versions"): it registers in both
indexes (workers, and readers of queued fields); it runs jobs of both forms, queued at zero
workers, while it serves alone and beside an earlier worker; a graceful stop leaves both."""

from __future__ import annotations

from typing import Any

from antre.client import Queue
from antre.handlers import HandlerRegistry
from antre.settings import QueueSettings
from registered_workers import register_earlier_worker
from worker_harness import eventually, running_worker, status_of


async def test_jobs_of_both_forms_run_and_a_stop_leaves_both_indexes(
        redis_client: Any, aredis: Any, qs: QueueSettings) -> None:
    registry = HandlerRegistry()
    seen: list[Any] = []

    @registry.handler("t")
    async def t(job: Any) -> None:
        seen.append(job.payload)

    queue = Queue(redis_client, settings=qs)
    at_rest = queue.enqueue("t", "queued at zero workers").job_id
    assert redis_client.exists(qs.keys.job(at_rest))  # nobody reads fields yet: a Hash
    async with running_worker(aredis, qs, registry, worker_id="w-now"):
        await eventually(lambda: status_of(redis_client, qs, at_rest) == "done",
                         message="the job queued at zero workers done")
        assert redis_client.zrange(qs.keys.field_readers, 0, -1) == ["w-now"]
        assert redis_client.zrange(qs.keys.workers, 0, -1) == ["w-now"]
        served = queue.enqueue("t", "queued while served").job_id
        await eventually(lambda: status_of(redis_client, qs, served) == "done",
                         message="the field job done")
        # An earlier worker joins: producers switch to Hashes at once, and this one runs them.
        register_earlier_worker(redis_client, qs)
        mixed = queue.enqueue("t", "queued beside an earlier worker").job_id
        await eventually(lambda: status_of(redis_client, qs, mixed) == "done",
                         message="the Hash job done")
    assert seen == ["queued at zero workers", "queued while served",
                    "queued beside an earlier worker"]
    assert redis_client.zrange(qs.keys.field_readers, 0, -1) == []
    assert redis_client.zrange(qs.keys.workers, 0, -1) == ["w-earlier"]

