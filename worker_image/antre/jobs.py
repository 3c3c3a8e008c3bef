"""What a job is, seen from each side: the handler's :class:`Job`, and the inspector's
:class:`JobInfo` with its lifecycle history. The record layout itself is in PROTOCOL.md."""

from __future__ import annotations

import asyncio
import json
import secrets
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field, replace
from enum import StrEnum
from typing import Any, Final, TypeVar

T = TypeVar("T")


class JobStatus(StrEnum):
    #: In the ready list, waiting for a worker.
    QUEUED = "queued"
    #: Waiting in the retry set for its first run (delayed) or for a busy resource.
    SCHEDULED = "scheduled"
    #: Leased to a worker; the lease deadline is in the processing set.
    PROCESSING = "processing"
    #: Failed an attempt and waits in the retry set for the next one.
    RETRYING = "retrying"
    #: Out of attempts, or failed permanently; in the dead list until replayed or purged.
    DEAD = "dead"
    #: Acknowledged; the record is kept for done_ttl.
    DONE = "done"
    #: Withdrawn before it ran; the record is kept for done_ttl.
    CANCELLED = "cancelled"


def new_job_id() -> str:
    """A 27-character id that sorts by creation time (ms, hex) then 64 random bits."""
    return f"{time.time_ns() // 1_000_000:011x}{secrets.token_hex(8)}"


@dataclass(frozen=True, slots=True)
class EnqueueResult:
    job_id: str
    #: False when a live idempotency key returned an existing job instead of a new one.
    created: bool


@dataclass(frozen=True, slots=True)
class ClaimedJob:
    """A job as the claim script hands it to a worker, payload still encoded."""

    id: str
    type: str
    payload_json: str
    attempt: int
    max_attempts: int
    lease: int
    idempotency_key: str | None
    resource_key: str | None
    created_at_ms: int
    headers_json: str
    #: The Redis clock at the claim (ms); with created_at_ms, the job's age on one clock.
    claimed_at_ms: int = 0


StepRecorder = Callable[[str, str], Awaitable[None]]
StepLoader = Callable[[], Awaitable[dict[str, str]]]


@dataclass(slots=True, eq=False)
class Job:
    """What a handler receives. ``payload`` is the decoded JSON value."""

    id: str
    type: str
    payload: Any
    attempt: int
    max_attempts: int
    idempotency_key: str | None
    resource_key: str | None
    created_at_ms: int
    headers: dict[str, str] = field(default_factory=dict)
    _record_step: StepRecorder | None = None
    _load_steps: StepLoader | None = None
    _loop: asyncio.AbstractEventLoop | None = None
    _steps: dict[str, str] | None = None

    @property
    def created_at(self) -> float:
        """Enqueue time, seconds since the epoch (Redis server clock)."""
        return self.created_at_ms / 1000

    async def step(self, name: str, action: Callable[[], Awaitable[T] | T]) -> T:
        """Runs ``action`` once across all attempts of this job.

        The first successful run's result (JSON-encodable) is recorded under the lease token;
        a replay of the job returns that result without calling ``action`` again. Recording
        raises :class:`antre.LeaseLost` if this run no longer holds the job.
        """
        steps = await self._loaded_steps()
        if name in steps:
            return json.loads(steps[name])  # type: ignore[no-any-return]
        outcome = action()
        result: T = await outcome if isinstance(outcome, Awaitable) else outcome
        await self._record(name, result)
        return result

    def step_blocking(self, name: str, action: Callable[[], T]) -> T:
        """:meth:`step` for plain ``def`` handlers, which run in a worker thread. ``action``
        runs in that thread too: only loading and recording the steps go to the worker's event
        loop, which keeps renewing leases and running other jobs meanwhile."""
        loop = self._loop
        if loop is None:
            raise RuntimeError("Job.step_blocking needs a job handed out by a worker")
        try:
            running = asyncio.get_running_loop()
        except RuntimeError:  # a handler thread: no loop of its own
            running = None
        if running is loop:  # waiting here for the loop would stop it for good
            raise RuntimeError("Job.step_blocking is for plain def handlers; in an async def "
                               "handler use `await job.step(...)`")
        steps = asyncio.run_coroutine_threadsafe(self._loaded_steps(), loop).result()
        if name in steps:
            return json.loads(steps[name])  # type: ignore[no-any-return]
        result = action()
        asyncio.run_coroutine_threadsafe(self._record(name, result), loop).result()
        return result

    async def _loaded_steps(self) -> dict[str, str]:
        if self._record_step is None or self._load_steps is None:
            raise RuntimeError("Job.step needs a job handed out by a worker")
        if self._steps is None:
            self._steps = await self._load_steps()
        return self._steps

    async def _record(self, name: str, result: Any) -> None:
        assert self._record_step is not None and self._steps is not None  # loaded first
        encoded = json.dumps(result, separators=(",", ":"))
        await self._record_step(name, encoded)
        self._steps[name] = encoded


@dataclass(frozen=True, slots=True)
class HistoryEvent:
    n: int
    event: str
    at_ms: int
    attempt: int | None = None
    worker: str | None = None
    error: str | None = None


@dataclass(frozen=True, slots=True)
class JobInfo:
    """A job record as stored, for ``Queue.get``, the dead letters and ``antre job``."""

    id: str
    type: str
    #: The decoded payload; the stored text when it is not JSON (see payload_error).
    payload: Any
    #: A :class:`JobStatus`; any other stored text as it is.
    status: str
    attempt: int
    max_attempts: int
    idempotency_key: str | None
    resource_key: str | None
    created_at_ms: int
    updated_at_ms: int
    last_error: str | None
    worker: str | None
    outcome: str | None
    history: tuple[HistoryEvent, ...]
    steps: dict[str, Any]
    #: Why the stored payload could not be decoded (then ``payload`` is its raw text), or None.
    payload_error: str | None = None

    @classmethod
    def from_hash(cls, fields: dict[str, str]) -> JobInfo:
        """Never raises for a record that has an id: a reader exists to show what is stored,
        including the record a foreign producer got wrong. What cannot be decoded is kept as
        the stored text; numbers that cannot be read count as 0."""
        steps = {name[5:]: _json_or_text(value) for name, value in fields.items()
                 if name.startswith("step:")}
        payload_text = fields.get("payload", "null")
        payload_error = None
        try:
            payload = json.loads(payload_text)
        except (ValueError, RecursionError) as exc:
            payload, payload_error = payload_text, f"undecodable payload: {exc}"
        status = fields.get("status", "")
        return cls(
            id=fields["id"], type=fields.get("type", ""), payload=payload,
            status=JobStatus(status) if status in _STATUSES else status,
            attempt=_int(fields.get("attempt")), max_attempts=_int(fields.get("max_attempts")),
            idempotency_key=fields.get("idempotency_key"), resource_key=fields.get("resource_key"),
            created_at_ms=_int(fields.get("created_at")),
            # A job not changed since its enqueue has no updated_at.
            updated_at_ms=_int(fields.get("updated_at", fields.get("created_at"))),
            last_error=fields.get("last_error"), worker=fields.get("worker"),
            outcome=fields.get("outcome"), history=read_history(fields), steps=steps,
            payload_error=payload_error,
        )

    def to_dict(self) -> dict[str, Any]:
        return {
            "id": self.id, "type": self.type, "payload": self.payload, "status": str(self.status),
            "attempt": self.attempt, "max_attempts": self.max_attempts,
            "idempotency_key": self.idempotency_key, "resource_key": self.resource_key,
            "created_at_ms": self.created_at_ms, "updated_at_ms": self.updated_at_ms,
            "last_error": self.last_error, "worker": self.worker, "outcome": self.outcome,
            "steps": self.steps,
            **({"payload_error": self.payload_error} if self.payload_error else {}),
            "history": [
                {k: v for k, v in (("n", e.n), ("event", e.event), ("at_ms", e.at_ms),
                                   ("attempt", e.attempt), ("worker", e.worker),
                                   ("error", e.error)) if v is not None}
                for e in self.history
            ],
        }


_STATUSES = frozenset(status.value for status in JobStatus)


def _int(value: str | None) -> int:
    """A stored counter or time; text another producer wrote ("5.0", "") as best it reads."""
    if value is None:
        return 0
    try:
        return int(value)
    except ValueError:
        try:
            return int(float(value))
        except (ValueError, OverflowError):
            return 0


def _json_or_text(value: str) -> Any:
    try:
        return json.loads(value)
    except (ValueError, RecursionError):  # RecursionError: nested deeper than Python parses
        return value


#: Ring slots of the history (HISTORY_SLOTS in _prelude.lua).
HISTORY_SLOTS: Final = 32
#: The worker of an entry written by the run that the latest entry naming a worker claimed.
SAME_WORKER: Final = "^"


def read_history(fields: dict[str, str]) -> tuple[HistoryEvent, ...]:
    """The lifecycle history of a record, oldest first: compact entries
    (``event|at hex|attempt|worker|error``, see _prelude.lua) and the JSON entries of records
    written before them. A ``^`` worker is the one the previous entry naming a worker gives."""
    events = _int(fields.get("events"))
    entries = sorted((_history_event(name, value, events) for name, value in fields.items()
                      if name.startswith("h:")), key=lambda event: event.n)
    worker = None
    resolved = []
    for entry in entries:
        if entry.worker == SAME_WORKER:
            entry = replace(entry, worker=worker)
        elif entry.worker is not None:
            worker = entry.worker
        resolved.append(entry)
    return tuple(resolved)


def _history_event(name: str, value: str, events: int) -> HistoryEvent:
    slot = _int(name[2:])
    try:
        if not value.startswith("{"):
            event, at_hex, attempt, *rest = value.split("|", 4)
            # The newest entry number <= events that lands in this slot.
            n = events - (events - slot) % HISTORY_SLOTS
            return HistoryEvent(n=n, event=event, at_ms=int(at_hex, 16),
                                attempt=int(attempt) if attempt else None,
                                worker=rest[0] if rest and rest[0] else None,
                                error=rest[1] if len(rest) > 1 else None)
        raw = json.loads(value)
        return HistoryEvent(n=int(raw["n"]), event=str(raw["event"]), at_ms=int(raw["at"]),
                            attempt=raw.get("attempt"), worker=raw.get("worker"),
                            error=raw.get("error"))
    except (ValueError, TypeError, KeyError, AttributeError):
        # Shown where its ring slot puts it, with what is stored.
        return HistoryEvent(n=slot, event="unreadable", at_ms=0, error=value[:500])
