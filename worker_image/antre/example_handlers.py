"""Example job handlers shipped in the package, so the stock worker image can run a queue before
you write your own: ``antre worker --handlers antre.example_handlers``.

Used by ``examples/jobqueue.yaml``, the Helm chart's ``exampleJobQueue`` and ``antre demo``.
Try them with ``antre enqueue send_email '{"to": "ana@example.com"}'`` and ``antre job ID``.
They do no real work; they show the three outcomes a handler has (done, retried, dead):

- ``send_email``: ``{"to": str, "flaky": bool}``; a flaky send fails its first attempt and is
  retried 0.2 s later (async handler).
- ``refresh_report``: ``{"report": int, "broken": bool}``; a broken report is a permanent
  failure, dead-lettered at once (plain ``def``, run in a thread).
- ``sleep``: ``{"seconds": number}`` (at most 3600); holds a worker slot that long, for trying
  autoscaling and graceful shutdown.
"""

from __future__ import annotations

import asyncio
import math
from typing import Any

from antre import handlers
from antre.errors import Permanent, Retry
from antre.jobs import Job

#: Longest ``sleep`` accepted, in seconds.
MAX_SLEEP_S = 3600


def _field(job: Job, name: str, kinds: tuple[type, ...], allowed: str) -> Any:
    """``payload[name]`` when the payload is an object and the value is one of ``kinds``;
    otherwise a permanent failure naming the field (retrying cannot fix a payload)."""
    value = job.payload.get(name) if isinstance(job.payload, dict) else None
    if isinstance(value, bool) or not isinstance(value, kinds):
        raise Permanent(f"payload.{name}: got {value!r}; must be {allowed}")
    return value


@handlers.handler("send_email")
async def send_email(job: Job) -> None:
    _field(job, "to", (str,), "an email address")
    await asyncio.sleep(0.001)  # the network call a real handler would make
    if job.payload.get("flaky") and job.attempt < 2:
        raise Retry("SMTP server busy", delay=0.2)


@handlers.handler("refresh_report")
def refresh_report(job: Job) -> None:
    report = _field(job, "report", (int,), "a report number")
    if job.payload.get("broken"):
        raise Permanent(f"report {report} no longer exists")


@handlers.handler("sleep")
async def sleep(job: Job) -> None:
    seconds = _field(job, "seconds", (int, float), f"a number of seconds from 0 to {MAX_SLEEP_S}")
    if not 0 <= seconds <= MAX_SLEEP_S or math.isnan(seconds):
        raise Permanent(f"payload.seconds: got {seconds!r}; must be from 0 to {MAX_SLEEP_S}")
    await asyncio.sleep(seconds)
