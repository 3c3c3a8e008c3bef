"""Loading the Lua scripts and running them with EVALSHA (EVAL on NOSCRIPT).

Every ``<name>.lua`` beside this module is one state change; ``_prelude.lua`` holds the helpers
they share, and the part of it a script uses is prepended at load time (:mod:`.prelude`). An
:class:`Op` bundles a script call with the parser of its reply, so the sync and asyncio clients
share one definition of every operation.

A durable op (:class:`Durability`, from ``QueueSettings.durable_replicas``) is sent with a
``WAIT`` behind it in one pipeline, so both use one connection (WAIT counts the replicas that
have that connection's writes) and one round trip; too few confirmations raise
:class:`~antre.errors.NotReplicated` carrying the op's result.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import cache
from importlib import resources
from typing import TYPE_CHECKING, Any, Final, Generic, TypeVar

import redis
import redis.asyncio.cluster
import redis.cluster

from antre import errors
from antre.protocol.prelude import needed_by

if TYPE_CHECKING:
    from antre.settings import QueueSettings

T = TypeVar("T")
ScriptArg = str | int | float

#: Ids one replay or purge call takes (MAX_IDS_PER_CALL in _prelude.lua): each removal is
#: O(log N), and the cap bounds how long one call holds Redis.
MAX_IDS_PER_CALL: Final = 1000



#: Jobs one script call of the worker or the client handles at most: a claim, an ack batch, a
#: lease renewal, a release, an ``enqueue_many`` call, a reaper pass, replays by id. Each job
#: costs Redis 10-40 us inside the script (a lease recovery the most), and Redis serves nobody
#: else meanwhile: the cap keeps a call at a few ms, far under 20 ms even on a busy host (a claim
#: of 10,000 at once held Redis 170 ms). Bigger batches are sent as several calls.
MAX_JOBS_PER_CALL: Final = 200

S = TypeVar("S")


def chunked(items: Sequence[S], size: int | None = None) -> list[Sequence[S]]:
    """``items`` in calls of at most ``size`` (default MAX_JOBS_PER_CALL); one empty chunk for
    no items."""
    step = size or MAX_JOBS_PER_CALL
    return [items[i:i + step] for i in range(0, len(items), step)] or [items[:0]]


def check_id_count(job_ids: Sequence[str]) -> None:
    """Refuses more ids than one call takes (the scripts refuse them too)."""
    if len(job_ids) > MAX_IDS_PER_CALL:
        raise errors.InvalidArgument(
            f"ids: got {len(job_ids)}; at most {MAX_IDS_PER_CALL} per call")


#: A job id as enqueue.lua accepts one: no ':', '|', space or control character (Lua's %s and
#: %c), and at most 128 bytes of UTF-8.
_JOB_ID = re.compile(r"[^:| \x00-\x1f\x7f]+")
_JOB_ID_RULE = "a job id: 1-128 bytes of text without ':', '|', spaces or control characters"


def is_job_id(value: object) -> bool:
    """Whether a job can have ``value`` as its id."""
    try:
        return isinstance(value, str) and bool(_JOB_ID.fullmatch(value)) and (
            len(value.encode()) <= 128)
    except UnicodeEncodeError:  # a lone surrogate: Redis gets UTF-8
        return False


def check_job_ids(name: str, job_ids: Sequence[object]) -> None:
    """Refuses, before anything is sent, an id no job can have (a caller's list checked whole,
    so that a bad id at its end cannot leave the calls before it done and the rest not)."""
    for job_id in job_ids:
        if not is_job_id(job_id):
            raise errors.InvalidArgument(f"{name}: got {job_id!r:.200}; must be {_JOB_ID_RULE}")


def check_limit(name: str, value: object, *, low: int = 1) -> None:
    """Refuses a count that is not a whole number >= ``low``."""
    if isinstance(value, bool) or not isinstance(value, int) or value < low:
        raise errors.InvalidArgument(f"{name}: got {value!r:.100}; must be an integer >= {low}")


#: The largest magnitude a number in a script's reply may have: every integer up to it is
#: exact as a float. Every count or time antre's scripts return is far below it (a job count, a
#: millisecond timestamp).
MAX_REPLY_INT: Final = 2**53 - 1


def bounded_int(value: Any) -> int:
    """``int(value)`` of a number in a reply when its magnitude is at most
    :data:`MAX_REPLY_INT`, else ValueError. A server that answers with more (another server, or
    a hostile one a JobQueue author runs: a 400-digit count) gives a reply of a shape no Redis
    running antre's scripts gives: it fails here like any other malformed reply, instead of as
    an OverflowError in a caller's arithmetic far from the read. The message never quotes the
    value: it may be megabytes long."""
    try:
        number = int(value)
    except OverflowError:  # int() of an infinite float
        raise ValueError("a number in a reply is not finite") from None
    if not -MAX_REPLY_INT <= number <= MAX_REPLY_INT:
        raise ValueError(f"a number in a reply is out of range (beyond {MAX_REPLY_INT})")
    return number


Lease = tuple[str, int]
"""(job id, lease token): what every settle call carries as its fence."""


def lease_args(leases: Sequence[Lease]) -> list[ScriptArg]:
    """The flat ``id, token, id, token ...`` tail of the batched scripts' ARGV."""
    args: list[ScriptArg] = []
    for job_id, token in leases:
        args.append(job_id)
        args.append(token)
    return args


@dataclass(frozen=True, slots=True)
class Script:
    name: str
    text: str
    sha: str


@cache
def load(name: str) -> Script:
    package = resources.files("antre.protocol")
    prelude = package.joinpath("_prelude.lua").read_text(encoding="utf-8")
    body = package.joinpath(f"{name}.lua").read_text(encoding="utf-8")
    text = needed_by(prelude, body) + "\n" + body
    return Script(name=name, text=text, sha=hashlib.sha1(text.encode()).hexdigest())


@dataclass(frozen=True, slots=True)
class Durability:
    """How many replicas must confirm a write, and for how long to wait (Redis ``WAIT``)."""

    replicas: int
    timeout_ms: int

    @staticmethod
    def of(settings: QueueSettings) -> Durability | None:
        """The queue's durability for its writes; None when it relies on asynchronous
        replication (``durable_replicas`` 0)."""
        if settings.durable_replicas <= 0:
            return None
        return Durability(settings.durable_replicas, max(int(settings.durable_timeout_s * 1000), 1))


@dataclass(frozen=True, slots=True)
class Op(Generic[T]):
    """One script call and the function that turns its raw reply into a typed result."""

    script: Script
    keys: Sequence[str]
    args: Sequence[ScriptArg]
    parse: Callable[[Any], T]
    durable: Durability | None = None
    """Replicas that must confirm the write before its result is trusted; None: none."""


_ERROR_TYPES: dict[str, type[errors.AntreError]] = {
    "ANTRE_NOT_LEASE_HOLDER": errors.LeaseLost,
    "ANTRE_JOB_NOT_FOUND": errors.JobNotFound,
    "ANTRE_JOB_BUSY": errors.JobBusy,
    "ANTRE_INVALID": errors.InvalidArgument,
    "ANTRE_IDEMPOTENCY_CONFLICT": errors.IdempotencyConflict,
}


#: A replica's refusal of a write inside a script as Redis 6.2 reports it, wrapped in the
#: script's error ("Error running script ... @user_script:307: -READONLY You can't write ...");
#: Redis 7 answers READONLY itself, which redis-py raises as ReadOnlyError.
_WRAPPED_READONLY: Final = re.compile(r"@user_script:? ?\d+: -READONLY ")


def translate_error(exc: redis.ResponseError) -> Exception:
    """Our exception for a script's error reply (a typed one for the ``ANTRE_*`` codes)."""
    message = str(exc)
    if isinstance(exc, redis.exceptions.OutOfMemoryError | redis.exceptions.ReadOnlyError) or (
            "used memory > 'maxmemory'" in message) or _WRAPPED_READONLY.search(message):
        return errors.RedisRefused(f"Redis refused the command: {message}")
    code = message.split(" ", 1)[0]
    error_type = _ERROR_TYPES.get(code)
    if error_type is not None:
        return error_type(message.split(" ", 1)[1] if " " in message else message)
    return errors.ProtocolError(f"Redis rejected a script call: {message}")


def is_noscript(exc: redis.ResponseError) -> bool:
    return isinstance(exc, redis.exceptions.NoScriptError) or str(exc).startswith("NOSCRIPT")


def evalsha_command(op: Op[Any]) -> tuple[ScriptArg, ...]:
    """``op`` as one EVALSHA command, for a caller that writes it on a connection itself (the
    worker's idle wait queues it behind a BLMOVE); its reply goes to :func:`parse_reply`."""
    return ("EVALSHA", op.script.sha, len(op.keys), *op.keys, *op.args)


def parse_reply(op: Op[T], reply: Any) -> T:
    """The result of ``op`` from its raw reply, an error reply raised as :func:`run_async`
    raises it (a NOSCRIPT reply is the caller's to retry with :func:`run_async`)."""
    if isinstance(reply, redis.ResponseError):
        raise translate_error(reply)
    return op.parse(reply)


def check_durable_client(client: Any, settings: QueueSettings) -> None:
    """Refuses durable writes on a Redis Cluster client, whose pipelines spread commands over
    nodes: a WAIT must follow the write on the same connection to count its replicas."""
    cluster = (redis.cluster.RedisCluster, redis.asyncio.cluster.RedisCluster)
    if settings.durable_replicas and isinstance(client, cluster):
        raise errors.InvalidArgument(
            f"durable_replicas: got {settings.durable_replicas} with a Redis Cluster URL; durable "
            "writes need one primary per queue reached through redis://, rediss:// or "
            "redis+sentinel://; set it to 0 for Redis Cluster")


def _confirmed(op: Op[T], reply: Any, confirmations: Any) -> T:
    """Parses a durable op's reply; raises NotReplicated when too few replicas confirmed it."""
    assert op.durable is not None
    result = op.parse(reply)
    confirmed = int(confirmations) if isinstance(confirmations, int) else 0
    if confirmed < op.durable.replicas:
        raise errors.NotReplicated(
            f"{op.script.name}: written on the primary but confirmed by {confirmed} of "
            f"{op.durable.replicas} replica(s) within {op.durable.timeout_ms} ms "
            "(QueueSettings.durable_replicas); a failover now could lose it",
            confirmed=confirmed, wanted=op.durable.replicas, result=result)
    return result


def _queue_script(pipe: Any, op: Op[Any], *, cached: bool) -> None:
    assert op.durable is not None
    numkeys = len(op.keys)
    if cached:
        pipe.evalsha(op.script.sha, numkeys, *op.keys, *op.args)
    else:
        pipe.eval(op.script.text, numkeys, *op.keys, *op.args)
    pipe.wait(op.durable.replicas, op.durable.timeout_ms)


def _run_durable(client: Any, op: Op[T]) -> T:
    for cached in (True, False):
        pipe = client.pipeline(transaction=False)
        _queue_script(pipe, op, cached=cached)
        reply, confirmations = pipe.execute(raise_on_error=False)
        if not (cached and isinstance(reply, redis.ResponseError) and is_noscript(reply)):
            break
    if isinstance(reply, redis.ResponseError):
        raise reply
    return _confirmed(op, reply, confirmations)


async def _run_durable_async(client: Any, op: Op[T]) -> T:
    for cached in (True, False):
        pipe = client.pipeline(transaction=False)
        _queue_script(pipe, op, cached=cached)
        reply, confirmations = await pipe.execute(raise_on_error=False)
        if not (cached and isinstance(reply, redis.ResponseError) and is_noscript(reply)):
            break
    if isinstance(reply, redis.ResponseError):
        raise reply
    return _confirmed(op, reply, confirmations)


def run(client: Any, op: Op[T]) -> T:
    """Runs ``op`` on a sync client (``redis.Redis`` or ``redis.cluster.RedisCluster``)."""
    numkeys = len(op.keys)
    try:
        if op.durable is not None:
            return _run_durable(client, op)
        try:
            reply = client.evalsha(op.script.sha, numkeys, *op.keys, *op.args)
        except redis.ResponseError as exc:
            if not is_noscript(exc):
                raise
            # EVAL runs the script and caches it, so later calls hit EVALSHA again.
            reply = client.eval(op.script.text, numkeys, *op.keys, *op.args)
    except redis.ResponseError as exc:
        raise translate_error(exc) from None
    except (redis.ConnectionError, redis.TimeoutError) as exc:
        raise errors.RedisUnavailable(f"Redis is unreachable: {exc}") from exc
    return op.parse(reply)


async def run_async(client: Any, op: Op[T]) -> T:
    """Runs ``op`` on an asyncio client (``redis.asyncio.Redis`` or its cluster twin)."""
    numkeys = len(op.keys)
    try:
        if op.durable is not None:
            return await _run_durable_async(client, op)
        try:
            reply = await client.evalsha(op.script.sha, numkeys, *op.keys, *op.args)
        except redis.ResponseError as exc:
            if not is_noscript(exc):
                raise
            reply = await client.eval(op.script.text, numkeys, *op.keys, *op.args)
    except redis.ResponseError as exc:
        raise translate_error(exc) from None
    except (redis.ConnectionError, redis.TimeoutError) as exc:
        raise errors.RedisUnavailable(f"Redis is unreachable: {exc}") from exc
    return op.parse(reply)
