"""Job handlers for the fault tests, imported by real ``antre worker`` subprocesses.

They leave traces in their own key space (never under the queue's prefix), in the Redis named by
``FAULT_EFFECTS_URL``:

- ``runs:<job id>``            [String] INCR at the start of every run (executions, duplicates included)
- ``effects:<key>``            [String] SET NX by the run that performs the effect; ``<key>`` is the
  job's idempotency key, else its id. Holds ``<worker name>:<attempt>`` of the winning run.
- ``effect_runs:<key>``        [Set] the runs whose SET NX won (idempotent under retries): the effect
  count, which must never exceed 1.
- ``finishes:<job id>``        [String] INCR when a run of ``record`` returns (won the effect or not).

Payload fields understood by ``record``:

- ``sleep_s``: seconds to sleep before the effect (the window a test kills or freezes a worker in);
- ``sleep_in``: worker names (``FAULT_WORKER_NAME``) that sleep; others run straight through.
  Missing means every worker sleeps.

``FAULT_HAND_BACK_MIN_S`` in the environment replaces ``antre.prefetch.HAND_BACK_MIN_S``.
"""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Callable
from typing import Any, TypeVar

import antre
import antre.prefetch
import redis

T = TypeVar("T")

WORKER_NAME = os.environ.get("FAULT_WORKER_NAME", "?")
if os.environ.get("FAULT_HAND_BACK_MIN_S"):
    # A test about prefetched jobs themselves keeps them prefetched behind its long jobs: a
    # worker hands such jobs back on its own a few round trips later.
    antre.prefetch.HAND_BACK_MIN_S = float(os.environ["FAULT_HAND_BACK_MIN_S"])
_client: redis.Redis | None = None


def effects_redis() -> redis.Redis:
    global _client
    if _client is None:
        _client = redis.Redis.from_url(os.environ["FAULT_EFFECTS_URL"], decode_responses=True,
                                       socket_timeout=5, socket_connect_timeout=2)
    return _client


def with_retry(action: Callable[[], T], budget_s: float = 30.0) -> T:
    """Rides out a Redis restart, as an idempotent handler of a real service would."""
    deadline = time.monotonic() + budget_s
    delay_s = 0.05
    while True:
        try:
            return action()
        except (redis.ConnectionError, redis.TimeoutError):
            if time.monotonic() > deadline:
                raise
            time.sleep(delay_s)
            delay_s = min(delay_s * 2, 0.5)


def _sleeps_here(payload: dict[str, Any]) -> bool:
    names = payload.get("sleep_in")
    return names is None or WORKER_NAME in names


def _effect(job: antre.Job) -> None:
    client = effects_redis()
    key = job.idempotency_key or job.id
    mine = f"{WORKER_NAME}:{job.attempt}"
    won = with_retry(lambda: client.set(f"effects:{key}", mine, nx=True))
    if not won:  # a retry after a lost reply finds its own value: it won after all
        won = with_retry(lambda: client.get(f"effects:{key}")) == mine
    if won:
        with_retry(lambda: client.sadd(f"effect_runs:{key}", mine))


@antre.handler("record")
def record(job: antre.Job) -> None:
    """A plain ``def`` (runs in a thread, so a SIGSTOP/SIGCONT resumes it mid-sleep)."""
    payload = job.payload or {}
    with_retry(lambda: effects_redis().incr(f"runs:{job.id}"))
    if payload.get("sleep_s") and _sleeps_here(payload):
        time.sleep(float(payload["sleep_s"]))
    _effect(job)
    with_retry(lambda: effects_redis().incr(f"finishes:{job.id}"))


@antre.handler("record_async")
async def record_async(job: antre.Job) -> None:
    """The asyncio twin of ``record``; its sleep is cancellable."""
    import asyncio

    payload = job.payload or {}
    with_retry(lambda: effects_redis().incr(f"runs:{job.id}"))
    if payload.get("sleep_s") and _sleeps_here(payload):
        await asyncio.sleep(float(payload["sleep_s"]))
    _effect(job)
    with_retry(lambda: effects_redis().incr(f"finishes:{job.id}"))


@antre.handler("kill_worker")
def kill_worker(job: antre.Job) -> None:
    """Takes its whole worker process down with SIGKILL, on every attempt."""
    with_retry(lambda: effects_redis().incr(f"runs:{job.id}"))
    os.kill(os.getpid(), signal.SIGKILL)
