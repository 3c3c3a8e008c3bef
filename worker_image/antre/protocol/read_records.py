"""Reading job records in whichever form they are stored (:file:`read_records.lua`): a field of
the queue's queued Hash until the job is claimed, a Hash while it is live, one packed String once
it is finished or dead (see PROTOCOL.md "Queued jobs" and "Packed records"). Every reader of
records goes through here, never through HGETALL, so each sees the same fields whatever the form.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from antre.protocol.scripts import Op, load
from antre.settings import QueueSettings


def _keys(settings: QueueSettings, job_ids: Sequence[str]) -> list[str]:
    k = settings.keys
    return [k.queued, k.retry, *(k.job(job_id) for job_id in job_ids)]


def records_op(settings: QueueSettings, job_ids: Sequence[str]) -> Op[list[dict[str, str]]]:
    """Every field of each job's record, as its Hash form would hold them ({} when there is no
    record). Callers send at most MAX_JOBS_PER_CALL ids per call."""
    k = settings.keys

    def parse(reply: list[list[Any]]) -> list[dict[str, str]]:
        return [{str(flat[i]): str(flat[i + 1]) for i in range(0, len(flat), 2)} for flat in reply]

    return Op(load("read_records"), _keys(settings, job_ids),
              [k.job_prefix], parse)


def fields_op(settings: QueueSettings, job_ids: Sequence[str],
              names: Sequence[str]) -> Op[list[list[str | None]]]:
    """The named fields of each job's record, in order (None when missing), as HMGET answers."""
    k = settings.keys

    def parse(reply: list[list[Any]]) -> list[list[str | None]]:
        return [[None if value is None else str(value) for value in values] for values in reply]

    return Op(load("read_records"), _keys(settings, job_ids),
              [k.job_prefix, *names], parse)
