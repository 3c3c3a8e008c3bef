"""Facts about the Redis server: the configuration that decides whether leases can be trusted,
and its clock (the only clock antre compares times on)."""

from __future__ import annotations

from typing import Any, Final

import redis

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


def _find_policy(info: Any) -> str | None:
    if isinstance(info, dict) and "maxmemory_policy" in info:
        return str(info["maxmemory_policy"])
    if isinstance(info, dict):  # cluster clients answer per node
        for value in info.values():
            policy = _find_policy(value)
            if policy is not None:
                return policy
    return None


def _policy_from_info(info: Any) -> str:
    policy = _find_policy(info)
    if policy is None:
        raise PolicyNotReported("INFO memory does not report maxmemory_policy")
    return policy


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


def eviction_policy_warning_sync(client: Any) -> str | None:
    return describe_policy(_policy_from_info(client.info("memory")))


async def eviction_policy_warning(client: Any) -> str | None:
    return describe_policy(_policy_from_info(await client.info("memory")))


async def server_time_ms(client: Any) -> int:
    """The Redis clock, ms since the epoch."""
    reply = await client.time()
    if isinstance(reply, dict):  # a cluster client answers per node
        reply = next(iter(reply.values()))
    return int(reply[0]) * 1000 + int(reply[1]) // 1000
