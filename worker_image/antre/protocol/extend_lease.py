"""Extend lease: the heartbeat's script call (:file:`extend_lease.lua`). Extends the leases (and
resource locks) a worker holds and refreshes its registry entry, in one round trip."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from antre.protocol.scripts import Lease, Op, ScriptArg, lease_args, load
from antre.settings import QueueSettings


@dataclass(frozen=True, slots=True)
class ExtendResult:
    now_ms: int
    #: Per lease in the call: True extended, False lost (requeued, settled or lock taken).
    held: list[bool]


def extend_lease_op(settings: QueueSettings, leases: Sequence[Lease], *, lease_ms: int,
                    worker_id: str, registry_entry_json: str,
                    registry_ttl_ms: int) -> Op[ExtendResult]:
    k = settings.keys
    args: list[ScriptArg] = [lease_ms, worker_id, registry_entry_json, registry_ttl_ms,
                             k.job_prefix, k.lock_prefix, *lease_args(leases)]

    def parse(reply: list[Any]) -> ExtendResult:
        return ExtendResult(now_ms=int(reply[0]), held=[bool(int(x)) for x in reply[1:]])

    return Op(load("extend_lease"), [k.processing, k.workers, k.worker(worker_id)], args, parse)
