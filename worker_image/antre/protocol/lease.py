"""The heartbeat: extend held leases and refresh the worker's registry entry in one call."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from antre.protocol.scripts import Op, ScriptArg, load
from antre.protocol.settle import Lease
from antre.settings import QueueSettings


@dataclass(frozen=True, slots=True)
class ExtendResult:
    now_ms: int
    #: Per lease in the call: True extended, False lost (requeued, settled or lock taken).
    held: list[bool]


def extend_op(settings: QueueSettings, leases: Sequence[Lease], *, lease_ms: int, worker_id: str,
              registry_entry_json: str, registry_ttl_ms: int) -> Op[ExtendResult]:
    k = settings.keys
    args: list[ScriptArg] = [lease_ms, worker_id, registry_entry_json, registry_ttl_ms,
                             k.job_prefix, k.lock_prefix]
    for job_id, token in leases:
        args.append(job_id)
        args.append(token)

    def parse(reply: list[Any]) -> ExtendResult:
        return ExtendResult(now_ms=int(reply[0]), held=[bool(int(x)) for x in reply[1:]])

    return Op(load("extend_lease"), [k.processing, k.workers, k.worker(worker_id)], args, parse)
