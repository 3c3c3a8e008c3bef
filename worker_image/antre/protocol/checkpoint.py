"""Checkpoint: record a completed step of a multi-step job, fenced by the lease
(:file:`checkpoint.lua`; what :meth:`antre.Job.step` writes)."""

from __future__ import annotations

from antre.protocol.scripts import Durability, Lease, Op, load
from antre.settings import QueueSettings


def checkpoint_op(settings: QueueSettings, lease: Lease, *, step: str, value_json: str,
                  worker_id: str) -> Op[None]:
    """Raises :class:`antre.LeaseLost` when the lease is not held any more."""
    k = settings.keys
    job_id, token = lease
    return Op(load("checkpoint"), [k.job(job_id), k.processing],
              [token, step, value_json, worker_id, job_id, k.lock_prefix], lambda _: None,
              durable=Durability.of(settings))
