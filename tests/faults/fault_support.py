"""Helpers of the fault tests: a handle on one ``antre worker`` subprocess, readers for the traces
:mod:`fault_handlers` leaves, and the queue invariant check."""

from __future__ import annotations

import json
import signal
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import redis
from antre import QueueSettings
from redis_servers import wait_until

QUEUE = "faults"


@dataclass
class WorkerProcess:
    """One ``antre worker`` subprocess; ``name`` is what its handlers see as FAULT_WORKER_NAME."""

    name: str
    process: subprocess.Popen[bytes]
    log_path: Path
    started_at: float = field(default_factory=time.monotonic)

    @property
    def pid(self) -> int:
        return self.process.pid

    def alive(self) -> bool:
        return self.process.poll() is None

    def signal(self, sig: signal.Signals) -> None:
        self.process.send_signal(sig)

    def kill(self) -> None:
        if self.alive():
            self.process.send_signal(signal.SIGCONT)  # a stopped process must wake to die cleanly
            self.process.kill()
        self.process.wait(timeout=10)

    def log_lines(self) -> list[dict[str, Any]]:
        """The worker's JSON log lines so far (a torn last line is skipped)."""
        entries = []
        for line in self.log_path.read_text(errors="replace").splitlines():
            try:
                entries.append(json.loads(line))
            except ValueError:
                continue
        return entries

    def events(self, event: str, job_id: str | None = None) -> list[dict[str, Any]]:
        return [e for e in self.log_lines() if e.get("event") == event
                and (job_id is None or e.get("job_id") == job_id)]

    def worker_id(self, timeout_s: float = 15.0) -> str:
        """Waits for the "worker started" line and returns the worker id it names."""
        def started() -> str | None:
            alive = self.alive()  # before reading: a worker may start, then die of its first job
            for entry in self.log_lines():
                if entry.get("msg") == "worker started":
                    return str(entry["worker_id"])
            if not alive:
                raise AssertionError(f"worker {self.name} exited early:\n{self.log_path.read_text()}")
            return None
        return str(wait_until(started, timeout_s=timeout_s, message=f"worker {self.name} to start"))


SpawnWorker = Callable[..., WorkerProcess]
"""The ``spawn_worker`` fixture: ``spawn(name, *, concurrency=, visibility_timeout_s=, ...)``."""


def counter(client: redis.Redis, key: str) -> int:
    return int(client.get(key) or 0)


def runs(client: redis.Redis, job_id: str) -> int:
    """How many times a handler started on this job (fault_handlers' ``runs:<id>``)."""
    return counter(client, f"runs:{job_id}")


def effect_count(client: redis.Redis, key: str) -> int:
    """How many runs performed the idempotent effect keyed ``key`` (must never exceed 1)."""
    return int(client.scard(f"effect_runs:{key}"))


def check_invariants(client: redis.Redis, settings: QueueSettings) -> None:
    """Every live job in exactly one structure (the shared ``tests/invariants.py``)."""
    from invariants import assert_invariants
    assert_invariants(client, settings)
