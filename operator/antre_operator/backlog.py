"""Measuring a queue: depth, the worker registry and the Redis eviction policy, via ``antre``.

Only measurement happens here (KEDA's ``Scaler`` split); ``scaling.py`` decides. Every read goes
through the ``antre`` package, so no key name is spelled twice; ``depth()`` is one round trip
(one Lua script). Failures of any kind become :class:`RedisReadError` with the URL's password
redacted, so the caller can keep the current replicas and report a condition.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import re
from collections.abc import Awaitable, Hashable
from typing import Any, Final, TypeVar
from urllib.parse import parse_qsl, urlsplit

import antre
import redis.exceptions
from antre import connection, redis_checks
from antre.keys import QueueKeys

from antre_operator import capped_redis, reply_cap, resolver, spec, status

T = TypeVar("T")

#: Jobs in flight whose records are read to find their pods; beyond it, the registry's counts.
MAX_RECORDS_READ: Final = 1000
#: The line of ``INFO memory`` that names the eviction policy.
_POLICY_LINE: Final = "maxmemory_policy:"


def _unparsed(response: Any, **options: Any) -> Any:
    """redis-py's callback for INFO, which leaves the reply as the server sent it."""
    return response


def policy_in_info(info: Any) -> str:
    """maxmemory_policy in a reply to ``INFO memory`` of one server, as it sent it (a cluster
    client parses it: a dict): found with one search, since redis-py's parse of each line in
    Python held the event loop every JobQueue shares for 0.5-0.8 s on 8 MiB of hostile short
    lines. Raises :class:`redis_checks.PolicyNotReported` when no line names it, and for replies
    per node, of which only the queue's own node's applies (:func:`redis_checks.policy_node`)."""
    if isinstance(info, dict) and _POLICY_LINE[:-1] in info:
        return str(info[_POLICY_LINE[:-1]])
    if isinstance(info, str):
        start = ("\n" + info).find("\n" + _POLICY_LINE)  # where its line starts in info
        if start >= 0:
            start += len(_POLICY_LINE)
            end = info.find("\n", start)
            return info[start:None if end < 0 else end].strip()
    raise redis_checks.PolicyNotReported("INFO memory does not report maxmemory_policy")


class RedisReadError(Exception):
    """Redis could not be read (unreachable, timed out, or answered with an error).

    ``str()`` is what the JobQueue's status and Events show: the same words whatever failed
    before Redis answered as Redis (a closed port, a silent one, another protocol, TLS, the
    credentials), and no byte a server sent, so the operator tells a JobQueue author nothing
    about the network that a port scanner would. ``detail`` (password redacted) is for the
    operator's log.
    """

    def __init__(self, message: str, *, detail: str | None = None) -> None:
        super().__init__(message)
        self.detail = detail or message


class RedisRefused(RedisReadError):
    """Redis answered, with an error reply: the command is refused (an ACL, a renamed or
    disabled command on managed Redis), not the connection."""


#: The first word of a Redis error reply ("NOPERM", "OOM"), the only part of one shown.
_ERROR_CODE_RE: Final = re.compile(r"[A-Z][A-Z_]{1,30}")
#: What the status says of any failure before Redis answered as Redis.
NO_REDIS_MESSAGE: Final = (
    "no Redis answered (the connection was refused, timed out or closed, the server does not "
    "speak Redis or TLS as the URL says, or it refused the credentials; the operator's log has "
    "the cause)")
#: Failures before Redis answered as Redis: one message for all of them. RedisClusterException
#: (no RedisError) is a cluster client's failure to find a working cluster, its cause one of the
#: others or a node that is no cluster's. The last five are a reply of a shape no Redis running
#: antre's scripts gives (another server, or a hostile one; the parsers bound every number,
#: ArithmeticError is the backstop for one they did not).
_NO_REDIS: Final = (redis.exceptions.ConnectionError, redis.exceptions.TimeoutError,
                    redis.exceptions.InvalidResponse, redis.exceptions.RedisClusterException,
                    antre.RedisUnavailable, OSError, TimeoutError, IndexError, KeyError,
                    TypeError, ValueError, ArithmeticError)


@dataclasses.dataclass(frozen=True)
class Reading:
    numbers: status.QueueNumbers
    in_flight: int
    """Jobs being processed right now (the processing set)."""
    workers: int


class QueueReader:
    """One Redis client for one JobQueue's queue; built per URL and closed when it changes."""

    def __init__(self, url: str, *, queue: str, prefix: str, timeout_s: float,
                 jobqueue: Hashable | None = None) -> None:
        """``jobqueue``: whose name lookups this reader's are (:mod:`resolver`); by default
        the reader's own."""
        self.url = url
        self.jobqueue: Hashable = self if jobqueue is None else jobqueue
        self.timeout_s = timeout_s
        self._client: Any = None
        self._queue: antre.AsyncQueue | None = None
        self._queue_name = queue
        self._prefix = prefix

    def matches(self, url: str, queue: str, prefix: str) -> bool:
        return (self.url, self._queue_name, self._prefix) == (url, queue, prefix)

    def _scrub(self, message: str) -> str:
        """The message with the URL redacted wherever it appears (any error may echo it), and
        the password too in case it appears alone."""
        redacted = connection.redact(self.url)
        message = message.replace(self.url, redacted)
        try:
            secrets = [urlsplit(self.url).password,
                       *(v for k, v in parse_qsl(urlsplit(self.url).query)
                         if k.lower() in spec.SECRET_QUERY_PARAMETERS)]
        except ValueError:
            secrets = []
        userinfo = self.url.partition("://")[2].rpartition("@")[0]
        secrets.append(userinfo.partition(":")[2])
        for secret in secrets:
            if secret:
                message = message.replace(secret, "***")
        return message

    def _ensure(self) -> antre.AsyncQueue:
        if self._queue is None:
            try:
                self._client = capped_redis.connect(self.url)
            except antre.InvalidArgument as exc:
                message = self._scrub(str(exc))
                raise RedisReadError(message, detail=message) from None
            if not connection.is_cluster_url(self.url):
                # policy_in_info reads it. Not a cluster client's: its nodes share its
                # callbacks, and redis-py 5 reads cluster_enabled from INFO parsed (every
                # cluster read failed there); its 64 KiB cap keeps the parse short anyway.
                self._client.set_response_callback("INFO", _unparsed)
            self._queue = antre.AsyncQueue(self._client, self._queue_name, prefix=self._prefix)
        return self._queue

    async def _call(self, awaitable: Awaitable[T], *, cap: int) -> T:
        """``awaitable``'s result, its replies costing at most ``cap`` (:mod:`reply_cap`)."""
        where = connection.redact(self.url)
        read = reply_cap.start(cap)  # every reply of this call counts against one cap
        try:
            with resolver.lookups_for(self.jobqueue):
                return await asyncio.wait_for(awaitable, timeout=self.timeout_s)
        except _NO_REDIS as exc:
            detail = (f"no answer within {self.timeout_s:g}s" if isinstance(exc, TimeoutError)
                      else f"{type(exc).__name__}: {exc}")
            raise RedisReadError(f"{where}: {NO_REDIS_MESSAGE}",
                                 detail=self._scrub(f"{where}: {detail}")) from None
        except (antre.AntreError, redis.exceptions.RedisError) as exc:
            code = _ERROR_CODE_RE.match(str(exc))
            raise RedisRefused(
                f"{where}: Redis refused the command"
                + (f" ({code.group(0)})" if code else ""),
                detail=self._scrub(f"{where}: {exc}")) from None
        finally:
            reply_cap.end(read)

    async def read(self) -> Reading:
        """Depth in one round trip."""
        queue = self._ensure()
        depth = await self._call(queue.depth(), cap=reply_cap.DEPTH_CAP)
        numbers = status.QueueNumbers(
            ready=depth.ready, due=depth.due, scheduled=depth.scheduled,
            processing=depth.processing, dead=depth.dead,
            oldest_ready_age_s=depth.oldest_ready_age_s)
        return Reading(numbers=numbers, in_flight=depth.processing, workers=depth.workers)

    async def jobs_in_flight_by_pod(self) -> dict[str, int]:
        """Jobs in flight per pod of every live worker, as they are now (three round trips).

        Each job of the processing set counts for the pod whose worker holds it (the job's
        record, read now; the live registry maps worker ids to pods). The registry's own
        counts are written at each heartbeat, up to 5 s ago: a pod that claimed a job since
        would pass for idle and be the first deleted, its job interrupted. With more than
        :data:`MAX_RECORDS_READ` jobs in flight those counts are used all the same.
        """
        queue = self._ensure()
        # One read: the registry is held while the rest is read.
        whole = reply_cap.start(reply_cap.IN_FLIGHT_CAP)
        try:
            return await self._jobs_in_flight_by_pod(queue)
        finally:
            reply_cap.end(whole)

    async def _jobs_in_flight_by_pod(self, queue: antre.AsyncQueue) -> dict[str, int]:
        registry = await self._call(queue.workers(), cap=reply_cap.REGISTRY_CAP)
        by_pod = {entry.pod: 0 for entry in registry}
        ids = await self._call(queue.redis.zrange(queue.keys.processing, 0, MAX_RECORDS_READ),
                               cap=reply_cap.IN_FLIGHT_IDS_CAP)
        if len(ids) > MAX_RECORDS_READ:
            for entry in registry:
                by_pod[entry.pod] += max(entry.in_flight, 0)
            return by_pod
        pod_of = {entry.worker_id: entry.pod for entry in registry}
        # The worker field alone: a job in flight is a Hash, and its payload may be large.
        pipe = queue.redis.pipeline(transaction=False)
        for job_id in ids:
            pipe.hget(queue.keys.job(job_id), "worker")
        holders = (await self._call(pipe.execute(raise_on_error=False),
                                    cap=reply_cap.HOLDERS_CAP) if ids else [])
        for holder in holders:
            # Settled meanwhile (None), or packed as done (a String: WRONGTYPE): in flight no more.
            pod = pod_of.get(holder) if isinstance(holder, str) else None
            if pod is not None:
                by_pod[pod] += 1
        return by_pod

    async def eviction_warning(self) -> str | None:
        """The warning for the server's maxmemory-policy (None: noeviction)."""
        queue = self._ensure()
        return await self._call(self._eviction_warning(queue.keys), cap=reply_cap.INFO_CAP)

    async def _eviction_warning(self, keys: QueueKeys) -> str | None:
        info = await redis_checks.info_memory(self._client, keys)
        return redis_checks.describe_policy(policy_in_info(info))

    async def close(self) -> None:
        if self._client is not None:
            client, self._client, self._queue = self._client, None, None
            # Closing a broken connection may fail; there is nothing left to do about it.
            with contextlib.suppress(Exception):
                await client.aclose()
