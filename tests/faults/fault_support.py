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
    """Every live job in exactly one structure. Uses the shared ``tests/invariants.py`` when it
    is there; until then, the minimal check below."""
    try:
        from invariants import assert_invariants
    except ModuleNotFoundError:
        _minimal_invariants(client, settings)
    else:
        assert_invariants(client, settings)


_HOME = {"queued": "ready", "processing": "processing", "retrying": "retry", "scheduled": "retry",
         "dead": "dead", "done": None, "cancelled": None}


def _minimal_invariants(client: redis.Redis, settings: QueueSettings) -> None:
    keys = settings.keys
    places: dict[str, list[str]] = {}
    for job_id in client.lrange(keys.ready, 0, -1):
        places.setdefault(job_id, []).append("ready")
    for job_id in client.zrange(keys.processing, 0, -1):
        places.setdefault(job_id, []).append("processing")
    for job_id in client.zrange(keys.retry, 0, -1):
        places.setdefault(job_id, []).append("retry")
    for job_id in client.lrange(keys.dead, 0, -1):
        places.setdefault(job_id, []).append("dead")
    statuses = {}
    for key in client.scan_iter(match=keys.job_prefix.replace("{", "[{]").replace("}", "[}]") + "*",
                                count=1000):
        statuses[key[len(keys.job_prefix):]] = client.hget(key, "status")
    problems = []
    for job_id, status in statuses.items():
        want = _HOME.get(status or "", "?")
        got = places.get(job_id, [])
        if want == "?":
            problems.append(f"{job_id}: unknown status {status!r}")
        elif got != ([want] if want else []):
            problems.append(f"{job_id}: status {status} but found in {got or 'no structure'}")
    for job_id, got in places.items():
        if job_id not in statuses:
            problems.append(f"{job_id}: in {got} without a job record")
    assert not problems, "queue invariants broken:\n" + "\n".join(problems[:50])
