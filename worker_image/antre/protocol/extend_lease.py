"""Extend lease: the heartbeat's script call (:file:`extend_lease.lua`). Extends the leases (and
resource locks) a worker holds, and the locks it keeps for runs still going after their job was
settled, and refreshes its registry entry, in one round trip."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from antre.protocol.scripts import Durability, Lease, Op, ScriptArg, chunked, lease_args, load
from antre.settings import QueueSettings

KeptLock = tuple[str, str]
"""(resource key, ``<job id>:<lease>``): a lock held for a run whose job was already settled."""


@dataclass(frozen=True, slots=True)
class ExtendResult:
    now_ms: int
    #: Per lease in the call: True extended, False lost (requeued, settled, past its deadline,
    #: or its resource taken by another job).
    held: list[bool]
    #: Per kept lock: True extended, False another job owns the resource now (or the run
    #: returned and its unlock freed the lock before this beat arrived).
    kept: list[bool]


def extend_lease_ops(settings: QueueSettings, leases: Sequence[Lease], *, lease_ms: int,
                     worker_id: str, registry_entry_json: str, registry_ttl_ms: int,
                     kept_locks: Sequence[KeptLock] = ()) -> list[Op[ExtendResult]]:
    """One heartbeat as calls of at most MAX_JOBS_PER_CALL leases (the kept locks, few, go with
    the first); :func:`merged` joins their results in lease order."""
    return [extend_lease_op(settings, chunk, lease_ms=lease_ms, worker_id=worker_id,
                            registry_entry_json=registry_entry_json,
                            registry_ttl_ms=registry_ttl_ms, kept_locks=kept_locks if i == 0 else ())
            for i, chunk in enumerate(chunked(leases))]


def merged(results: Sequence[ExtendResult]) -> ExtendResult:
    """The results of one heartbeat's calls as one, in lease order; the earliest clock."""
    return ExtendResult(now_ms=min(result.now_ms for result in results),
                        held=[held for result in results for held in result.held],
                        kept=[kept for result in results for kept in result.kept])


def extend_lease_op(settings: QueueSettings, leases: Sequence[Lease], *, lease_ms: int,
                    worker_id: str, registry_entry_json: str, registry_ttl_ms: int,
                    kept_locks: Sequence[KeptLock] = ()) -> Op[ExtendResult]:
    k = settings.keys
    args: list[ScriptArg] = [lease_ms, worker_id, registry_entry_json, registry_ttl_ms,
                             k.job_prefix, k.lock_prefix, len(leases), *lease_args(leases)]
    for resource_key, token in kept_locks:
        args.extend((resource_key, token))

    def parse(reply: list[Any]) -> ExtendResult:
        flags = [bool(int(x)) for x in reply[1:]]
        return ExtendResult(now_ms=int(reply[0]), held=flags[:len(leases)],
                            kept=flags[len(leases):])

    return Op(load("extend_lease"), [k.processing, k.workers, k.worker(worker_id),
                                     k.field_readers], args, parse,
              durable=Durability.of(settings))
