"""The handler the chaos soak runs in real ``antre worker`` processes.

Payload: ``ms`` (how long the job works), ``fail`` (``none``, ``transient``: fails its first
attempt, ``permanent``: raises :class:`antre.Permanent`). It leaves traces in files the soak
reads (``BENCH_RECORD_DIR``): ``exec`` gets ``<job id> <attempt> <pid>`` when a run starts,
``effect`` gets ``<job id> keyed|plain`` when a run performs its effect. A job with an
idempotency key performs its effect through ``SET chaosfx:<key> NX`` (what a handler that
uses the key does with an external system), so a re-run never repeats it; a job without one
just performs it, so every re-run that gets that far repeats it.
"""

from __future__ import annotations

import asyncio
import os
from typing import Any

import antre
import redis.asyncio

from bench.adapters._record import _append

_effects: Any = None


def _effects_client() -> Any:
    global _effects
    if _effects is None:
        _effects = redis.asyncio.Redis.from_url(os.environ["BENCH_REDIS_URL"], decode_responses=True)
    return _effects


@antre.handler("chaos")
async def chaos(job: antre.Job) -> None:
    payload = job.payload
    _append("exec", f"{job.id} {job.attempt} {os.getpid()}\n".encode())
    await asyncio.sleep(payload["ms"] / 1000)
    if payload["fail"] == "permanent":
        raise antre.Permanent("planned permanent failure")
    if payload["fail"] == "transient" and job.attempt == 1:
        raise RuntimeError("planned transient failure")
    if job.idempotency_key:
        if await _effects_client().set(f"chaosfx:{job.idempotency_key}", f"{job.id}:{job.attempt}",
                                       nx=True):
            _append("effect", f"{job.id} keyed\n".encode())
    else:
        _append("effect", f"{job.id} plain\n".encode())
