"""Workers in a queue's registry, as their heartbeats put them there, for tests of what depends
on who serves a queue: enqueue writes a queued job as a field of the queued Hash only while
every registered worker is of this version, and at least one is (PROTOCOL.md "Versions")."""

from __future__ import annotations

from typing import Any

from antre.protocol import scripts
from antre.protocol.extend_lease import extend_lease_op
from antre.settings import QueueSettings


def register_worker(client: Any, settings: QueueSettings, worker_id: str = "w-registered",
                    ttl_ms: int = 600_000) -> None:
    """A worker of this version registers: its heartbeat with no lease (the real script)."""
    scripts.run(client, extend_lease_op(settings, [], lease_ms=30_000, worker_id=worker_id,
                                        registry_entry_json='{"pod":"test"}',
                                        registry_ttl_ms=ttl_ms))


def register_earlier_worker(client: Any, settings: QueueSettings,
                            worker_id: str = "w-earlier", ttl_ms: int = 600_000) -> None:
    """A worker of an earlier version registers: its entry and the `workers` index only, as
    its heartbeat wrote them."""
    keys = settings.keys
    now_ms = int(client.time()[0]) * 1000
    client.set(keys.worker(worker_id), '{"pod":"earlier"}', px=ttl_ms)
    client.zadd(keys.workers, {worker_id: now_ms})
