"""Structured logs: one JSON object per line, one line per job lifecycle event.

Lifecycle events go to the ``antre.lifecycle`` logger: ``claimed``, ``acked`` and
``handed_back`` at DEBUG (one per run is a lot of lines at thousands of jobs per second; at INFO
:mod:`antre.outcomes` writes a periodic ``settled`` summary instead), the other outcomes
(``retrying``, ``dead``, ``lease_lost``, ``released``, ``duplicate``) at INFO, failures at
WARNING. The level set by
``--log-level`` / ``ANTRE_LOG_LEVEL`` never hides the few lines of a process's own life (started,
stopping on a signal, stopped, Redis reachable again): they are what an operator reads first.
"""

from __future__ import annotations

import json
import logging
import sys
import time
from typing import Any, Final

from antre import errors
from antre.jobs import ClaimedJob
from antre.protocol.claim import Duplicate

lifecycle = logging.getLogger("antre.lifecycle")
log = logging.getLogger("antre")

_RESERVED = set(logging.LogRecord("", 0, "", 0, "", (), None).__dict__) | {"message", "asctime"}


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, Any] = {
            "ts": round(record.created, 3),
            "level": record.levelname.lower(),
            "logger": record.name,
            "msg": record.getMessage(),
        }
        for key, value in record.__dict__.items():
            if key not in _RESERVED and not key.startswith("_"):
                entry[key] = value
        if record.exc_info:
            entry["exc"] = self.formatException(record.exc_info)
        return json.dumps(entry, default=str, separators=(",", ":"))


#: The levels ``--log-level`` / ``ANTRE_LOG_LEVEL`` take (in any case).
LEVELS: Final = ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL")
#: Other names Python's logging takes, which worked before the levels were checked: a
#: deployment with ANTRE_LOG_LEVEL=WARN must not stop starting after an upgrade.
ALIASES: Final = {"WARN": "WARNING", "FATAL": "CRITICAL", "NOTSET": "DEBUG"}
LEVEL_OPTION: Final = "--log-level (env ANTRE_LOG_LEVEL)"


def level_of(text: str, *, label: str = LEVEL_OPTION) -> int:
    """The logging level named by ``text``; anything else raises InvalidArgument naming
    ``label``, the value and the allowed levels."""
    name = text.strip().upper()
    name = ALIASES.get(name, name)
    if name not in LEVELS:
        raise errors.InvalidArgument(f"{label}: got {text!r}; must be one of "
                                     f"{', '.join(LEVELS)}")
    return logging.getLevelNamesMapping()[name]


#: Loggers of a process's own life (the worker's, the API's): at INFO whatever the level.
PROCESS_LOGGERS: Final = ("antre.worker", "antre.api")


def configure(level: str = "INFO", *, process_lines: bool = True) -> None:
    """JSON lines on stderr at ``level`` (one of :data:`LEVELS`, else InvalidArgument); the
    process loggers stay at INFO or below unless ``process_lines`` is False (``antre demo``
    prints its own story)."""
    number = level_of(level)  # before any change: a bad level leaves logging as it was
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JsonFormatter())
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(number)
    for name in PROCESS_LOGGERS:
        logging.getLogger(name).setLevel(min(root.level, logging.INFO) if process_lines
                                         else logging.NOTSET)


def job_event(event: str, job: ClaimedJob, *, worker_id: str, level: int = logging.INFO,
              **fields: Any) -> None:
    """Logs one lifecycle event of ``job``; cheap when the level is off."""
    if not lifecycle.isEnabledFor(level):
        return
    extra = {
        "event": event, "job_id": job.id, "job_type": job.type, "attempt": job.attempt,
        "worker_id": worker_id, "idempotency_key": job.idempotency_key,
        "resource_key": job.resource_key, **fields,
    }
    lifecycle.log(level, event, extra=extra)


def duplicate_event(duplicate: Duplicate, *, worker_id: str) -> None:
    """A job the claim settled as done without running it: its idempotency key was done. The
    same fields as :func:`job_event`'s lines, ``attempt`` the runs it had before."""
    if lifecycle.isEnabledFor(logging.INFO):
        lifecycle.info("duplicate", extra={
            "event": "duplicate", "job_id": duplicate.id, "job_type": duplicate.type,
            "attempt": duplicate.attempt, "worker_id": worker_id,
            "idempotency_key": duplicate.idempotency_key,
            "resource_key": duplicate.resource_key})


def monotonic_ms() -> float:
    return time.monotonic() * 1000
