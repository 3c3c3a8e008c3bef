"""Helpers of the fault tests: a handle on one ``antre worker`` subprocess, readers for the traces
:mod:`fault_handlers` leaves, and the queue invariant check."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import redis
from antre import QueueSettings
from redis_servers import child_env, wait_until

QUEUE = "faults"
HERE = Path(__file__).parent


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


def start_worker(name: str, *, redis_url: str, effects_url: str, log_dir: Path, index: int = 0,
                 queue: str = QUEUE, concurrency: int = 4, visibility_timeout_s: float = 1.0,
                 grace_period_s: float = 5.0, reaper_interval_s: float = 0.2,
                 backoff_base_s: float = 0.05, backoff_max_s: float = 0.2,
                 extra_args: tuple[str, ...] = (),
                 extra_env: dict[str, str] | None = None) -> WorkerProcess:
    """Starts one ``antre worker`` subprocess serving :mod:`fault_handlers`, whose traces go to
    ``effects_url``; its JSON log goes to a file of its own in ``log_dir``."""
    env = {**child_env(), **(extra_env or {})}
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(HERE), env.get("PYTHONPATH", "")) if p)
    env["FAULT_WORKER_NAME"] = name
    env["FAULT_EFFECTS_URL"] = effects_url
    log_path = log_dir / f"worker-{name}-{index}.log"
    command = [
        sys.executable, "-m", "antre", "worker", "--handlers", "fault_handlers",
        "--redis-url", redis_url, "--queue", queue,
        "--concurrency", str(concurrency), "--visibility-timeout", str(visibility_timeout_s),
        "--grace-period", str(grace_period_s), "--reaper-interval", str(reaper_interval_s),
        "--backoff-base", str(backoff_base_s), "--backoff-max", str(backoff_max_s),
        # Every lifecycle event on its own line (at INFO successes are only counted), so the
        # tests can tell a run that was acked from one that was not.
        "--log-level", "DEBUG", *extra_args,
    ]
    with log_path.open("wb") as log_file:
        process = subprocess.Popen(command, env=env, stdout=log_file, stderr=subprocess.STDOUT,
                                   cwd=log_dir)
    return WorkerProcess(name, process, log_path)


@contextlib.contextmanager
def worker_spawner(*, redis_url: str, effects_url: str, log_dir: Path) -> Iterator[SpawnWorker]:
    """The ``spawn_worker`` fixtures: ``spawn(name, **options)`` starts a worker on ``redis_url``
    (or ``redis_url=`` of its own) and, unless ``wait_started=False``, waits until it logs its
    start. Every worker still running is killed on exit, whatever state it was left in."""
    spawned: list[WorkerProcess] = []

    def spawn(name: str, *, wait_started: bool = True, **options: Any) -> WorkerProcess:
        worker = start_worker(name, redis_url=options.pop("redis_url", None) or redis_url,
                              effects_url=effects_url, log_dir=log_dir, index=len(spawned),
                              **options)
        spawned.append(worker)
        if wait_started:
            worker.worker_id()
        return worker

    try:
        yield spawn
    finally:
        for worker in spawned:
            worker.kill()


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
