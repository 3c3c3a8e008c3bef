"""Facts about the Redis server: the configuration that decides whether leases can be trusted,
and its clock (the only clock antre compares times on)."""

from __future__ import annotations

from typing import Any, Final

import redis
import redis.asyncio.cluster

from antre import connection
from antre.keys import QueueKeys

WANTED_POLICY = "noeviction"
#: Every maxmemory-policy Redis 7 knows. Only these names are quoted: any other text a server
#: sends (a hostile one may send megabytes) is described, never copied into a status or a log.
KNOWN_POLICIES: Final = frozenset({
    "noeviction", "allkeys-lru", "allkeys-lfu", "allkeys-random",
    "volatile-lru", "volatile-lfu", "volatile-random", "volatile-ttl",
})


class PolicyNotReported(redis.ResponseError):
    """INFO answered without ``maxmemory_policy`` (a proxy, or a server that only speaks the
    protocol). The policy is as unknown as when INFO is refused, and every caller treats the two
    alike: a refusal is a ``ResponseError`` too. Taking silence for ``noeviction`` would hide a
    server that may evict jobs."""


def _policy_from_info(info: Any) -> str:
    # One server's reply: replies per node (a cluster client told to ask several) would read as
    # not reported, since only the queue's own node says what applies to it (policy_node).
    if not (isinstance(info, dict) and "maxmemory_policy" in info):
        raise PolicyNotReported("INFO memory does not report maxmemory_policy")
    return str(info["maxmemory_policy"])


def describe_policy(policy: str) -> str | None:
    """The warning for a maxmemory-policy, or None when it is safe. Its length is bounded
    whatever the server sent: only a known policy name is quoted."""
    if policy == WANTED_POLICY:
        return None
    named = repr(policy) if policy in KNOWN_POLICIES else "not a policy Redis knows"
    return (
        f"Redis maxmemory-policy is {named}: under memory pressure Redis may evict job "
        "records, leases or locks and silently lose jobs. Set maxmemory-policy to 'noeviction'."
    )


def policy_node(client: Any, keys: QueueKeys) -> dict[str, Any]:
    """The options that send INFO to the server whose maxmemory-policy decides for the queue of
    ``keys``: none for a client of one server; on a cluster client, the primary holding the
    queue's slot (every key of a queue shares its hash tag, so that primary holds the whole
    queue). Left to itself, redis-py sends INFO to its default node (the first primary it
    knows), whose policy says nothing of a queue on another node. An asyncio cluster client
    must have read its slots first (:func:`info_memory`)."""
    if not connection.is_cluster_client(client):
        return {}
    return {"target_nodes": client.get_node_from_key(keys.ready)}


def info_memory_sync(client: Any, keys: QueueKeys) -> Any:
    """``INFO memory`` of the server that holds the queue of ``keys``, as the client parses it."""
    return client.info("memory", **policy_node(client, keys))


async def info_memory(client: Any, keys: QueueKeys) -> Any:
    """:func:`info_memory_sync` on an asyncio client."""
    if isinstance(client, redis.asyncio.cluster.RedisCluster):
        await client.initialize()  # its slots are read by its first command; a no-op after
    return await client.info("memory", **policy_node(client, keys))


def eviction_policy_warning_sync(client: Any, keys: QueueKeys) -> str | None:
    return describe_policy(_policy_from_info(info_memory_sync(client, keys)))


async def eviction_policy_warning(client: Any, keys: QueueKeys) -> str | None:
    return describe_policy(_policy_from_info(await info_memory(client, keys)))


async def server_time_ms(client: Any) -> int:
    """The Redis clock, ms since the epoch."""
    reply = await client.time()
    if isinstance(reply, dict):  # a cluster client answers per node
        reply = next(iter(reply.values()))
    return int(reply[0]) * 1000 + int(reply[1]) // 1000
