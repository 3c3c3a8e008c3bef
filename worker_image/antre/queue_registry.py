"""The registry of queue names under a prefix (:func:`antre.keys.queue_registry`, a Set).

Producers add their queue before their first enqueue and workers when they start, so the
dashboard lists the queues with one SMEMBERS instead of scanning the keyspace. The registry is a
key of its own Cluster slot, so it is written with a plain SADD beside the scripts, never inside
one. Registering is idempotent; a failure to register never fails the enqueue or the worker that
tried (the next enqueue tries again), because the registry only serves the dashboard.
"""

from __future__ import annotations

import contextlib
import logging
from typing import Any, Final

from antre import errors, keys

log = logging.getLogger("antre.registry")

#: The most names the dashboard reads from the registry (SSCAN pages): a bound, not a quota.
MAX_LISTED: Final = 1000


def register(redis_client: Any, prefix: str, queue: str) -> bool:
    """Adds ``queue`` (sync client); False when Redis could not be reached or refused."""
    try:
        redis_client.sadd(keys.queue_registry(prefix), queue)
    except Exception as exc:  # the enqueue or the worker reports Redis errors itself
        log.debug("could not register the queue", extra={"queue": queue, "error": str(exc)})
        return False
    return True


async def register_async(redis_client: Any, prefix: str, queue: str) -> bool:
    """Adds ``queue`` (asyncio client); False when Redis could not be reached or refused."""
    try:
        await redis_client.sadd(keys.queue_registry(prefix), queue)
    except Exception as exc:
        log.debug("could not register the queue", extra={"queue": queue, "error": str(exc)})
        return False
    return True


async def registered_queues(redis_client: Any, prefix: str) -> list[str]:
    """The registered names that are valid queue names, sorted; at most :data:`MAX_LISTED`."""
    names: set[str] = set()
    async for name in redis_client.sscan_iter(keys.queue_registry(prefix), count=500):
        with contextlib.suppress(errors.InvalidArgument):  # not ours: skipped
            names.add(keys.validate_queue_name(name))
        if len(names) >= MAX_LISTED:
            break
    return sorted(names)
