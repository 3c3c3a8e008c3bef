"""Cancel: withdraw a job that is not running (:file:`cancel.lua`)."""

from __future__ import annotations

from antre.protocol.scripts import Durability, Op, load
from antre.settings import QueueSettings


def cancel_op(settings: QueueSettings, job_id: str) -> Op[str]:
    """Returns the status the job had. Raises :class:`antre.JobNotFound`, or
    :class:`antre.JobBusy` for a job being processed."""
    k = settings.keys
    return Op(load("cancel"), [k.ready, k.retry, k.dead, k.stats, k.job(job_id), k.queued],
              [job_id, int(settings.done_ttl_s * 1000), k.idempotency_prefix], str,
              durable=Durability.of(settings))
