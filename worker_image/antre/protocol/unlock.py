"""Unlock: free the resource lock a run kept after its job was settled (:file:`unlock.lua`):
a handler thread that outlived its job timeout, or a shutdown, returns at last."""

from __future__ import annotations

from antre.protocol.scripts import Lease, Op, load
from antre.settings import QueueSettings


def unlock_op(settings: QueueSettings, lease: Lease, *, resource_key: str) -> Op[bool]:
    """True when the lock was still the run's and is now free (then the job that has waited
    longest for the resource goes to the head of the queue)."""
    k = settings.keys
    job_id, token = lease
    return Op(load("unlock"),
              [k.resource_lock(resource_key), k.job(job_id), k.ready, k.retry,
               k.waiting_prefix + resource_key],
              [job_id, token, k.job_prefix],
              lambda reply: bool(int(reply)))
