"""Enqueue: one or many jobs in one script call, deduplicated by idempotency key."""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from antre import errors, limits
from antre.jobs import EnqueueResult, new_job_id
from antre.protocol.scripts import MAX_JOBS_PER_CALL, Durability, Op, ScriptArg, load
from antre.settings import QueueSettings

#: Jobs per script call in enqueue_many: big enough to amortise the round trip, small enough
#: not to stall Redis for other clients.
BATCH_SIZE = MAX_JOBS_PER_CALL

#: One encoder for every payload (json.dumps builds one per call given options). Sorted keys:
#: the same payload is the same text whatever order a dict was built in, so a retried enqueue
#: matches its idempotency key's digest.
#: KEYS[1..7] of enqueue.lua are the queue's (ready, retry, stats, queued, workers,
#: field_readers, earlier_workers); each job's keys follow.
QUEUE_KEY_COUNT = 7
_PAYLOAD_ENCODER = json.JSONEncoder(separators=(",", ":"), allow_nan=False, sort_keys=True)
#: The same text unescaped, to find a lone surrogate the ASCII text carries as an escape.
_TEXT_ENCODER = json.JSONEncoder(separators=(",", ":"), allow_nan=False, sort_keys=True,
                                 ensure_ascii=False)
_CONTROL_CHARACTER = re.compile("[\x00-\x1f\x7f-\x9f]")


@dataclass(frozen=True, slots=True)
class NewJob:
    type: str
    payload: Any = None
    idempotency_key: str | None = None
    resource_key: str | None = None
    max_attempts: int | None = None
    delay_s: float = 0.0
    headers: dict[str, str] | None = None


def encode(settings: QueueSettings, job: NewJob) -> list[ScriptArg]:
    """Validates one job and returns its 8 script arguments (the id is generated here)."""
    if not isinstance(job.type, str) or not job.type or len(job.type) > 200 or (
            _CONTROL_CHARACTER.search(job.type)):
        raise errors.InvalidArgument(
            f"type: got {job.type!r}; must be a non-empty string of at most 200 characters, "
            "without control characters"
        )
    _check_utf8("type", job.type)
    try:
        payload = _PAYLOAD_ENCODER.encode(job.payload)
    except (TypeError, ValueError, RecursionError) as exc:
        raise errors.InvalidArgument(
            f"payload: {exc}; must be JSON-serialisable (dict with string keys, list, str, int, "
            "float, bool, None), nested at most a few hundred levels"
        ) from None
    _check_text("payload", payload, job.payload)
    headers = _encode_headers(job.headers)
    _check_text("headers", headers, job.headers)
    size = len(payload.encode()) + len(headers.encode())
    if size > settings.max_payload_bytes:
        raise errors.PayloadTooLarge(
            f"payload: {size} bytes encoded; must be at most {settings.max_payload_bytes} bytes "
            "with the headers (QueueSettings.max_payload_bytes)"
        )
    max_attempts = settings.max_attempts if job.max_attempts is None else job.max_attempts
    if isinstance(max_attempts, bool) or not isinstance(max_attempts, int) or not (
            1 <= max_attempts <= limits.MAX_ATTEMPTS):
        raise errors.InvalidArgument(f"max_attempts: got {max_attempts!r}; must be an integer "
                                     f"from 1 to {limits.MAX_ATTEMPTS}")
    errors.check_delay("delay", job.delay_s)
    for name in ("idempotency_key", "resource_key"):
        value = getattr(job, name)
        if value is not None and (not isinstance(value, str) or not value or len(value) > 512):
            raise errors.InvalidArgument(
                f"{name}: got {value!r}; must be a non-empty string of at most 512 characters"
            )
        _check_utf8(name, value)
    return [
        new_job_id(), job.type, payload, max_attempts, int(job.delay_s * 1000),
        job.idempotency_key or "", job.resource_key or "", headers,
    ]


def _check_utf8(name: str, value: str | None) -> None:
    """Redis gets strings as UTF-8: a lone surrogate (from a command line's undecodable bytes,
    say) cannot be sent."""
    try:
        if value is not None:
            value.encode()
    except UnicodeEncodeError as exc:
        raise errors.InvalidArgument(
            f"{name}: got {value!r:.100}; must be valid Unicode text ({exc.reason} at position "
            f"{exc.start})") from None


def _check_text(name: str, encoded: str, value: Any) -> None:
    """Refuses a value whose strings hold an unpaired surrogate (``"\\ud800"`` in JSON):
    escaped, it reaches Redis, but whoever reads it back (a worker, the dashboard) gets a
    string no UTF-8 can carry. Only text with a surrogate escape (``\\ud8..``-``\\udf..``,
    an emoji's pair included) is encoded again to tell."""
    if "\\ud" in encoded:
        _check_utf8(name, _TEXT_ENCODER.encode(value))


def _encode_headers(headers: Any) -> str:
    if not headers:
        return ""
    if not isinstance(headers, dict) or not all(
            isinstance(name, str) and isinstance(value, str) for name, value in headers.items()):
        raise errors.InvalidArgument(
            f"headers: got {headers!r:.200}; must be an object of string names to string values"
        )
    return json.dumps(headers, separators=(",", ":"))


def _parse(reply: list[Any]) -> list[EnqueueResult]:
    return [EnqueueResult(job_id=str(reply[i]), created=bool(int(reply[i + 1])))
            for i in range(0, len(reply), 2)]


class EnqueueCalls:
    """Builds the enqueue script calls of one queue; what every call shares (the script, the
    queue's keys, its durability) is worked out once, since a producer enqueuing one job per
    call builds a call per job."""

    def __init__(self, settings: QueueSettings) -> None:
        self.settings = settings
        k = settings.keys
        self._script = load("enqueue")
        self._queue_keys = (k.ready, k.retry, k.stats, k.queued, k.workers, k.field_readers,
                            k.earlier_workers)
        self._job_prefix = k.job("")
        self._idempotency_prefix = k.idempotency("")
        self._durable = Durability.of(settings)

    def ops(self, jobs: Sequence[NewJob]) -> list[Op[list[EnqueueResult]]]:
        """Script calls for ``jobs``, BATCH_SIZE per call, in order. Validation happens for all
        jobs before any call is built, so a bad job enqueues nothing."""
        return self.ops_of_encoded([encode(self.settings, job) for job in jobs])

    def ops_of_encoded(self, encoded: Sequence[list[ScriptArg]]) -> list[Op[list[EnqueueResult]]]:
        """Script calls for jobs :func:`encode` returned the arguments of, BATCH_SIZE per call."""
        ops = []
        for start in range(0, len(encoded), BATCH_SIZE):
            batch = encoded[start:start + BATCH_SIZE]
            script_keys = list(self._queue_keys)
            # ARGV[2] is unused since keys live as long as their jobs.
            args: list[ScriptArg] = [len(batch), 0]
            for job_args in batch:
                script_keys.append(self._job_prefix + str(job_args[0]))
                if job_args[5]:
                    script_keys.append(self._idempotency_prefix + str(job_args[5]))
                args.extend(job_args)
            ops.append(Op(self._script, script_keys, args, _parse, self._durable))
        return ops


def enqueue_ops(settings: QueueSettings, jobs: Sequence[NewJob]) -> list[Op[list[EnqueueResult]]]:
    """Script calls for ``jobs`` (see :meth:`EnqueueCalls.ops`)."""
    return EnqueueCalls(settings).ops(jobs)
