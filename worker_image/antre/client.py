"""The producer and inspection client: :class:`Queue` (sync) and :class:`AsyncQueue` (asyncio).

Both build the same protocol operations (:mod:`antre.protocol`) and differ only in how they
run them, so a job enqueued by one is exactly what the other would have written.
"""

from __future__ import annotations

import asyncio
import functools
import re
from collections.abc import Awaitable, Callable, Iterable, Sequence
from datetime import timedelta
from typing import Any, Concatenate, Generic, ParamSpec, TypeVar

from antre import connection, errors, keys, queue_registry, redis_checks, tracing
from antre.enqueue_batcher import EnqueueBatcher
from antre.jobs import EnqueueResult, JobInfo
from antre.pinned_connection import PinnedConnection
from antre.protocol import scripts
from antre.protocol.cancel import cancel_op
from antre.protocol.depth import Depth, depth_op
from antre.protocol.enqueue import EnqueueCalls, NewJob, encode
from antre.protocol.purge import OldestPurged, purge_oldest_op, purge_op
from antre.protocol.read_records import records_op
from antre.protocol.reap import ReapResult, reap_op
from antre.protocol.replay import OldestReplayed, replay_oldest_op, replay_op
from antre.protocol.workers import WorkerEntry, WorkerRegistry, workers_op
from antre.settings import QueueSettings

JobSpec = NewJob | tuple[str, Any] | dict[str, Any]


def _seconds(value: float | timedelta | None) -> float:
    if value is None:
        return 0.0
    if isinstance(value, timedelta):
        return value.total_seconds()
    return value


def to_new_job(spec: JobSpec) -> NewJob:
    """Accepts a NewJob, a (type, payload) pair or a dict with NewJob's field names."""
    if isinstance(spec, NewJob):
        return spec
    if isinstance(spec, tuple) and len(spec) == 2:
        return NewJob(type=spec[0], payload=spec[1])
    if isinstance(spec, dict):
        allowed = {"type", "payload", "idempotency_key", "resource_key", "max_attempts", "delay",
                   "delay_s", "headers"}
        unknown = set(spec) - allowed
        if unknown:
            raise errors.InvalidArgument(
                f"job: unknown field(s) {sorted(unknown)}; allowed: {sorted(allowed)}"
            )
        if "type" not in spec:
            raise errors.InvalidArgument("job: missing field 'type'")
        return NewJob(
            type=spec["type"], payload=spec.get("payload"),
            idempotency_key=spec.get("idempotency_key"), resource_key=spec.get("resource_key"),
            max_attempts=spec.get("max_attempts"),
            delay_s=_seconds(spec.get("delay", spec.get("delay_s"))), headers=spec.get("headers"),
        )
    raise errors.InvalidArgument(
        f"job: got {spec!r}; must be a NewJob, a (type, payload) tuple or a dict"
    )


def _job_info(job_id: str, fields: dict[str, str]) -> JobInfo:
    if not fields or "id" not in fields:
        raise errors.JobNotFound(f"job {job_id}: no such job (never existed, or its record expired)")
    return JobInfo.from_hash(fields)


def _dead_infos(ids: Sequence[str], records: Sequence[dict[str, str]]) -> list[JobInfo]:
    # A record that vanished (purged meanwhile) is left out; any other is shown, raw or not.
    return [JobInfo.from_hash({"id": job_id, **fields})
            for job_id, fields in zip(ids, records, strict=True) if fields]


#: Ids per purge call (and per read of dead records): fewer than the scripts accept
#: (MAX_IDS_PER_CALL), so that a call keeps Redis free for others.
_IDS_PER_CALL = min(scripts.MAX_JOBS_PER_CALL, scripts.MAX_IDS_PER_CALL)
#: Ids per replay call: a replay turns each packed dead record back into a Hash, about five
#: times a claim's Redis time per job, so a call of 200 held Redis up to 25 ms with 20,000
#: dead letters (bench/flat_at_scale.py); the goal is under 20 ms for any call.
_REPLAYS_PER_CALL = _IDS_PER_CALL // 2


def _chunks(job_ids: Sequence[str], size: int = _IDS_PER_CALL) -> list[Sequence[str]]:
    return [job_ids[i:i + size] for i in range(0, len(job_ids), size)]


def _checked_ids(job_ids: Sequence[str], limit: int,
                 per_call: int = _IDS_PER_CALL) -> list[Sequence[str]]:
    """A replay's or purge's ids in calls, every id checked before the first call is sent."""
    scripts.check_limit("limit", limit)
    scripts.check_job_ids("ids", job_ids)
    return _chunks(job_ids, per_call)


_Call = TypeVar("_Call")


class _OfTheOldest(Generic[_Call]):
    """What a replay and a purge of the ``limit`` oldest dead jobs share: the sizes of their
    script calls and the cutoff those pass on.

    Calls of at most ``_per_call`` go on until ``limit`` jobs are done or a call takes fewer
    letters than it asked for. Only letters that were dead when the first call ran are taken:
    it answers the newest score in the list, and every later call takes only letters scored at
    or below it, so a job that dies meanwhile (scored later, see dead_letter in _prelude.lua),
    for the first time or again after a replay, is left for the next replay or purge, whatever
    other clients do. Lazy: the limit may be far larger than the dead-letter list
    (``purge(limit=10**12)``), and only the calls made count. The limit is checked here,
    before anything is sent."""

    _per_call: int

    def __init__(self, settings: QueueSettings, limit: int) -> None:
        scripts.check_limit("limit", limit)
        self.settings = settings
        self.limit = limit
        self.done = 0
        self._cutoff = ""
        self._asked = 0
        self._ended = False

    def next_op(self) -> scripts.Op[_Call] | None:
        """The next script call; None once the replay or purge is over."""
        if self._ended or self.done >= self.limit:
            return None
        self._asked = min(self._per_call, self.limit - self.done)
        return self._op(self._asked, self._cutoff)

    def _op(self, limit: int, cutoff: str) -> scripts.Op[_Call]:
        raise NotImplementedError

    def _took(self, *, taken: int, cutoff: str, done: int) -> None:
        self.done += done
        self._cutoff = cutoff
        self._ended = taken < self._asked


class _ReplayOfTheOldest(_OfTheOldest[OldestReplayed]):
    """The script calls of a replay of the oldest dead jobs, shared by both clients:
    ``while (op := replay.next_op()) is not None: replay.took(run(op))``. Calls of 100; a
    letter whose record is gone (evicted, deleted by hand) is dropped and does not count, nor
    end the replay. A job it replayed that dies again is not replayed twice."""

    _per_call = _REPLAYS_PER_CALL

    def __init__(self, settings: QueueSettings, limit: int) -> None:
        super().__init__(settings, limit)
        self.replayed: list[str] = []

    def _op(self, limit: int, cutoff: str) -> scripts.Op[OldestReplayed]:
        return replay_oldest_op(self.settings, limit=limit, cutoff=cutoff)

    def took(self, call: OldestReplayed) -> None:
        self.replayed.extend(call.replayed)
        self._took(taken=call.taken, cutoff=call.cutoff, done=len(call.replayed))


class _PurgeOfTheOldest(_OfTheOldest[OldestPurged]):
    """The script calls of a purge of the oldest dead jobs, shared by both clients, as
    :class:`_ReplayOfTheOldest`'s. Calls of 200; a letter whose record is gone counts as
    purged. A job that dies while the purge runs is not deleted unseen."""

    _per_call = _IDS_PER_CALL

    def _op(self, limit: int, cutoff: str) -> scripts.Op[OldestPurged]:
        return purge_oldest_op(self.settings, limit=limit, cutoff=cutoff)

    def took(self, call: OldestPurged) -> None:
        self._took(taken=call.purged, cutoff=call.cutoff, done=call.purged)


#: The last index ZREVRANGE takes (a signed 64-bit integer); beyond it Redis refuses the call.
_LAST_INDEX = 2**63 - 1


def _page_range(limit: int, offset: int) -> tuple[int, int]:
    """The ZREVRANGE start and stop of a page of dead letters, after checking ``limit`` and
    ``offset``. Any limit >= 1 is allowed, so a page that reaches past the last index Redis
    takes ends there (no list is that long)."""
    scripts.check_limit("limit", limit)
    scripts.check_limit("offset", offset, low=0)
    return min(offset, _LAST_INDEX), min(offset + limit - 1, _LAST_INDEX)


def _check_decoding(redis_client: Any) -> None:
    """Refuses a client that answers bytes: ids, types and payloads would come back as
    ``b'...'`` text."""
    get_encoder = getattr(redis_client, "get_encoder", None)
    if get_encoder is not None and not get_encoder().decode_responses:
        raise errors.InvalidArgument(
            "redis_client: got a client that returns bytes; create it with "
            "decode_responses=True, or use Queue.from_url(url)")


class _QueueBase:
    def __init__(self, redis_client: Any, name: str | None = None, *, prefix: str | None = None,
                 settings: QueueSettings | None = None) -> None:
        if settings is None:
            settings = QueueSettings(name="default" if name is None else name,
                                     prefix=keys.DEFAULT_PREFIX if prefix is None else prefix)
        elif name is not None and name != settings.name:
            raise errors.InvalidArgument(
                f"queue name: got {name!r} and settings.name {settings.name!r}; give one"
            )
        scripts.check_durable_client(redis_client, settings)
        _check_decoding(redis_client)
        self.redis = redis_client
        self.settings = settings
        self.keys = settings.keys
        self._enqueue_calls = EnqueueCalls(settings)
        #: Whether this queue's name is in the registry the dashboard lists (added once).
        self._registered = False

    @property
    def name(self) -> str:
        return self.settings.name

    def _new_job(self, job_type: str, payload: Any, *, idempotency_key: str | None,
                 resource_key: str | None, max_attempts: int | None,
                 delay: float | timedelta | None, headers: dict[str, str] | None) -> NewJob:
        # The producer's trace context rides in the job, so the worker's spans join the trace.
        # Anything but a dict is left for validation to name.
        if headers is None or isinstance(headers, dict):
            headers = {**tracing.inject(), **(headers or {})} or None
        return NewJob(type=job_type, payload=payload, idempotency_key=idempotency_key,
                      resource_key=resource_key, max_attempts=max_attempts,
                      delay_s=_seconds(delay), headers=headers)

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.settings.name!r}, prefix={self.settings.prefix!r})"


#: How the enqueue script names the first job of its call in an error.
_FIRST_OF_THE_CALL = "job 1: "


def _unnumbered(exc: errors.InvalidArgument) -> errors.InvalidArgument:
    """The script numbers a job it refuses within its call ("job 1: ..."), which tells the job
    of an ``enqueue_many`` apart; of a single enqueue it reads like a job id."""
    message = str(exc)
    if not message.startswith(_FIRST_OF_THE_CALL):
        return exc
    return type(exc)(message[len(_FIRST_OF_THE_CALL):])


def _refused_after_writes(exc: errors.InvalidArgument,
                          written: list[EnqueueResult]) -> errors.InvalidArgument:
    """Redis refused a later script call of an ``enqueue_many`` (an idempotency conflict, a key
    of the wrong type) after the earlier calls wrote their jobs: the refused job is numbered in
    the caller's whole list, and the jobs already written are named and carried."""
    if not written:
        return exc
    message = re.sub(r"^job (\d+)", lambda m: f"job {len(written) + int(m.group(1))}", str(exc),
                     count=1)
    refused = type(exc)(f"{message}; its call of up to {scripts.MAX_JOBS_PER_CALL} jobs wrote "
                        f"nothing, the calls before it wrote the first {len(written)} (the "
                        "error's .enqueued holds their results)")
    refused.enqueued = tuple(written)
    return refused


def _unconfirmed_enqueue(exc: errors.NotReplicated, written: list[EnqueueResult], *,
                         single: bool) -> errors.NotReplicated:
    """The NotReplicated of an enqueue, naming its jobs and what to do; ``result`` is the
    EnqueueResult (``single``) or every result of the call so far."""
    batch: list[EnqueueResult] = exc.result  # type: ignore[assignment]
    results = [*written, *batch]
    shown = ", ".join(result.job_id for result in batch[:3]) + (" ..." if len(batch) > 3 else "")
    return errors.NotReplicated(
        f"{exc} (job {shown}); enqueue again with the same idempotency key to be sure (without "
        "one, a retry adds a second job)", confirmed=exc.confirmed, wanted=exc.wanted,
        result=results[0] if single else results)


class Queue(_QueueBase):
    """A queue seen from a synchronous producer or an operator's shell."""

    def __init__(self, redis_client: Any, name: str | None = None, *, prefix: str | None = None,
                 settings: QueueSettings | None = None) -> None:
        super().__init__(redis_client, name, prefix=prefix, settings=settings)
        self._pinned = PinnedConnection(redis_client)

    @classmethod
    def from_url(cls, url: str, name: str | None = None, **kwargs: Any) -> Queue:
        return cls(connection.connect(url), name, **kwargs)

    def _run(self, op: scripts.Op[Any]) -> Any:
        return self._pinned.run(op)

    def enqueue(self, job_type: str, payload: Any = None, *, idempotency_key: str | None = None,
                resource_key: str | None = None, max_attempts: int | None = None,
                delay: float | timedelta | None = None,
                headers: dict[str, str] | None = None) -> EnqueueResult:
        """Adds one job. With a live ``idempotency_key`` it returns the existing job instead
        (``created`` is False), so a producer may retry an enqueue safely."""
        job = self._new_job(job_type, payload, idempotency_key=idempotency_key,
                            resource_key=resource_key, max_attempts=max_attempts, delay=delay,
                            headers=headers)
        [op] = self._enqueue_calls.ops([job])
        self._register()
        try:
            return self._run(op)[0]  # type: ignore[no-any-return]
        except errors.NotReplicated as exc:
            raise _unconfirmed_enqueue(exc, [], single=True) from None
        except errors.InvalidArgument as exc:
            raise _unnumbered(exc) from None

    def enqueue_many(self, jobs: Iterable[JobSpec]) -> list[EnqueueResult]:
        """Adds many jobs, 200 per script call. All are validated before any is written, and
        Redis checks each call's jobs before it writes any of them; when it refuses a later
        call (an idempotency key used for another payload), the jobs of the calls before it are
        enqueued, and the error carries them as ``enqueued``."""
        results: list[EnqueueResult] = []
        for op in self._enqueue_calls.ops([to_new_job(spec) for spec in jobs]):
            self._register()
            try:
                results.extend(self._run(op))
            except errors.NotReplicated as exc:
                raise _unconfirmed_enqueue(exc, results, single=False) from None
            except errors.InvalidArgument as exc:
                raise _refused_after_writes(exc, results) from None
        return results

    def _register(self) -> None:
        if not self._registered:
            self._registered = queue_registry.register(self.redis, self.settings.prefix, self.name)

    def get(self, job_id: str) -> JobInfo:
        scripts.check_job_ids("job_id", [job_id])
        return _job_info(job_id, self._run(records_op(self.settings, [job_id]))[0])

    def stats(self) -> Depth:
        return self._run(depth_op(self.settings))  # type: ignore[no-any-return]

    def depth(self) -> Depth:
        return self.stats()

    def workers(self) -> list[WorkerEntry]:
        """Live workers (registry entries that cannot be read are left out)."""
        return self.worker_registry().entries

    def worker_registry(self) -> WorkerRegistry:
        """Live workers, and the ids of registry entries that cannot be read."""
        return self._run(workers_op(self.settings))  # type: ignore[no-any-return]

    def dead_letters(self, *, limit: int = 100, offset: int = 0) -> list[JobInfo]:
        """Dead jobs, newest first. Every record is shown, fields that cannot be decoded as
        they are stored (see :meth:`JobInfo.from_hash`)."""
        ids = self.redis.zrevrange(self.keys.dead, *_page_range(limit, offset))
        return _dead_infos(ids, [record for chunk in _chunks(ids)
                                 for record in self._run(records_op(self.settings, chunk))])

    def dead_count(self) -> int:
        return int(self.redis.zcard(self.keys.dead))

    def replay(self, job_ids: Sequence[str] = (), *, limit: int = 1000) -> list[str]:
        """Moves dead jobs back to the queue with a fresh attempt budget (given ids, or up to
        ``limit`` of the oldest, among those dead when it starts); returns the ids replayed.
        Ids go 100 per script call, all checked before the first is sent."""
        if job_ids:
            return [job_id for chunk in _checked_ids(job_ids, limit, _REPLAYS_PER_CALL)
                    for job_id in self._run(replay_op(self.settings, chunk, limit=len(chunk)))]
        replay = _ReplayOfTheOldest(self.settings, limit)
        while (op := replay.next_op()) is not None:
            replay.took(self._run(op))
        return replay.replayed

    def purge(self, job_ids: Sequence[str] = (), *, limit: int = 1000) -> int:
        """Deletes dead jobs for good (given ids, or up to ``limit`` of the oldest, among those
        dead when it starts); returns how many. Ids go 200 per script call."""
        if job_ids:
            return sum(self._run(purge_op(self.settings, chunk, limit=len(chunk)))
                       for chunk in _checked_ids(job_ids, limit))
        purge = _PurgeOfTheOldest(self.settings, limit)
        while (op := purge.next_op()) is not None:
            purge.took(self._run(op))
        return purge.done

    def cancel(self, job_id: str) -> str:
        """Withdraws a job that is not running; returns the status it had."""
        scripts.check_job_ids("job_id", [job_id])
        return self._run(cancel_op(self.settings, job_id))  # type: ignore[no-any-return]

    def reap(self, *, limit: int = 1000) -> ReapResult:
        """One reaper pass, unconditionally (what ``antre reaper --once`` runs)."""
        return self._run(reap_op(self.settings, limit=limit, pass_lock_ms=0, holder="cli"))  # type: ignore[no-any-return]

    def eviction_policy_warning(self) -> str | None:
        return redis_checks.eviction_policy_warning_sync(self.redis, self.keys)

    def close(self) -> None:
        self._pinned.close()
        self.redis.close()


P = ParamSpec("P")
R = TypeVar("R")


def _awaited_by_close(method: Callable[Concatenate[AsyncQueue, P], Awaitable[R]]
                      ) -> Callable[Concatenate[AsyncQueue, P], Awaitable[R]]:
    """A call :meth:`AsyncQueue.close` waits for: one that ends on a closed connection would
    fail halfway through a method of several script calls, some of its writes made and none
    reported."""
    @functools.wraps(method)
    async def counted(queue: AsyncQueue, /, *args: P.args, **kwargs: P.kwargs) -> R:
        queue._calls_open += 1
        queue._calls_ended.clear()
        try:
            return await method(queue, *args, **kwargs)
        finally:
            queue._calls_open -= 1
            if not queue._calls_open:
                queue._calls_ended.set()
    return counted


class AsyncQueue(_QueueBase):
    """A queue seen from an asyncio producer, the operator or the HTTP API.

    Enqueues made concurrently share script calls (:mod:`antre.enqueue_batcher`); each still
    returns its own result or error, once Redis has its job."""

    def __init__(self, redis_client: Any, name: str | None = None, *, prefix: str | None = None,
                 settings: QueueSettings | None = None) -> None:
        super().__init__(redis_client, name, prefix=prefix, settings=settings)
        self._batcher = EnqueueBatcher(redis_client, self._enqueue_calls)
        #: Calls under way (a method of several script calls counts once): see close().
        self._calls_open = 0
        self._calls_ended = asyncio.Event()
        self._calls_ended.set()

    @classmethod
    def from_url(cls, url: str, name: str | None = None, **kwargs: Any) -> AsyncQueue:
        return cls(connection.connect_async(url), name, **kwargs)

    @_awaited_by_close
    async def _run(self, op: scripts.Op[Any]) -> Any:
        return await scripts.run_async(self.redis, op)

    async def enqueue(self, job_type: str, payload: Any = None, *,
                      idempotency_key: str | None = None, resource_key: str | None = None,
                      max_attempts: int | None = None, delay: float | timedelta | None = None,
                      headers: dict[str, str] | None = None) -> EnqueueResult:
        """Adds one job (see :meth:`Queue.enqueue`)."""
        job = self._new_job(job_type, payload, idempotency_key=idempotency_key,
                            resource_key=resource_key, max_attempts=max_attempts, delay=delay,
                            headers=headers)
        job_args = encode(self.settings, job)  # a bad job is refused here, alone
        await self._register()
        try:
            return await self._batcher.enqueue(job_args)
        except errors.NotReplicated as exc:
            raise _unconfirmed_enqueue(exc, [], single=True) from None
        except errors.InvalidArgument as exc:
            raise _unnumbered(exc) from None

    @_awaited_by_close
    async def enqueue_many(self, jobs: Iterable[JobSpec]) -> list[EnqueueResult]:
        results: list[EnqueueResult] = []
        for op in self._enqueue_calls.ops([to_new_job(spec) for spec in jobs]):
            await self._register()
            try:
                results.extend(await self._run(op))
            except errors.NotReplicated as exc:
                raise _unconfirmed_enqueue(exc, results, single=False) from None
            except errors.InvalidArgument as exc:
                raise _refused_after_writes(exc, results) from None
        return results

    async def _register(self) -> None:
        if not self._registered:
            self._registered = await queue_registry.register_async(
                self.redis, self.settings.prefix, self.name)

    async def get(self, job_id: str) -> JobInfo:
        scripts.check_job_ids("job_id", [job_id])
        return _job_info(job_id, (await self._run(records_op(self.settings, [job_id])))[0])

    async def stats(self) -> Depth:
        return await self._run(depth_op(self.settings))  # type: ignore[no-any-return]

    async def depth(self) -> Depth:
        return await self.stats()

    async def workers(self) -> list[WorkerEntry]:
        """Live workers (registry entries that cannot be read are left out)."""
        return (await self.worker_registry()).entries

    async def worker_registry(self) -> WorkerRegistry:
        """Live workers, and the ids of registry entries that cannot be read."""
        return await self._run(workers_op(self.settings))  # type: ignore[no-any-return]

    @_awaited_by_close
    async def dead_letters(self, *, limit: int = 100, offset: int = 0) -> list[JobInfo]:
        ids = await self.redis.zrevrange(self.keys.dead, *_page_range(limit, offset))
        return _dead_infos(ids, [record for chunk in _chunks(ids)
                                 for record in await self._run(records_op(self.settings, chunk))])

    async def dead_count(self) -> int:
        return int(await self.redis.zcard(self.keys.dead))

    @_awaited_by_close
    async def replay(self, job_ids: Sequence[str] = (), *, limit: int = 1000) -> list[str]:
        if job_ids:
            return [job_id for chunk in _checked_ids(job_ids, limit, _REPLAYS_PER_CALL)
                    for job_id in await self._run(replay_op(self.settings, chunk, limit=len(chunk)))]
        replay = _ReplayOfTheOldest(self.settings, limit)
        while (op := replay.next_op()) is not None:
            replay.took(await self._run(op))
        return replay.replayed

    @_awaited_by_close
    async def purge(self, job_ids: Sequence[str] = (), *, limit: int = 1000) -> int:
        if job_ids:
            return sum([await self._run(purge_op(self.settings, chunk, limit=len(chunk)))
                        for chunk in _checked_ids(job_ids, limit)])
        purge = _PurgeOfTheOldest(self.settings, limit)
        while (op := purge.next_op()) is not None:
            purge.took(await self._run(op))
        return purge.done

    async def cancel(self, job_id: str) -> str:
        scripts.check_job_ids("job_id", [job_id])
        return await self._run(cancel_op(self.settings, job_id))  # type: ignore[no-any-return]

    async def reap(self, *, limit: int = 1000) -> ReapResult:
        return await self._run(reap_op(self.settings, limit=limit, pass_lock_ms=0, holder="cli"))  # type: ignore[no-any-return]

    async def eviction_policy_warning(self) -> str | None:
        return await redis_checks.eviction_policy_warning(self.redis, self.keys)

    async def close(self) -> None:
        """Closes the client once the calls under way have ended, each ``enqueue_many``,
        ``replay`` or ``purge`` to its last script call."""
        await self._batcher.wait_idle()
        await self._calls_ended.wait()
        await self.redis.aclose()
