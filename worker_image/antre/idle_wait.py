"""The idle worker's wait: a blocking BLMOVE on the ready list with the claim queued right
behind it on the same connection, so the claim runs inside Redis the moment a job arrives.

Redis executes a connection's commands in order: the claim written after the BLMOVE waits in
the connection's buffer while the BLMOVE blocks, and runs as soon as it returns (a job pushed,
or the timeout), in the same event-loop turn of Redis. A job enqueued on an idle queue therefore
reaches its handler after one round trip instead of two (wake up, then claim). The BLMOVE moves
the list's tail onto itself, so nothing ever leaves the ready list except through the claim:
there is no worker-owned place for a crash to strand a job in, and nothing new to recover.

A claim that ran after a long wait leased its jobs long after the wait was sent, so the worker
must not count their leases from the send: :attr:`IdleWait.waited_s` says how long Redis held
the claim back, measured on Redis's clock alone (a ``TIME`` sent with the wait, and the time the
claim reports), so no two clocks are compared.

The wait keeps one connection of the client's pool for itself
(:class:`~antre.direct_connection.DirectConnection`), on which the claim loop also sends the
claims it makes without waiting. A stop unblocks it with ``CLIENT UNBLOCK`` from another
connection instead of cancelling the read: a cancelled read could lose the reply of a claim
that already ran, stranding its jobs until their leases expire.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

import redis
import redis.asyncio

from antre import errors
from antre.direct_connection import DirectConnection
from antre.protocol import scripts
from antre.protocol.scripts import Op

log = logging.getLogger("antre.worker")

T = TypeVar("T")
A = TypeVar("A")


@dataclass(frozen=True, slots=True)
class Ahead(Generic[A]):
    """A script call written in front of the wait, in the same write: Redis runs it at once and
    its reply comes back before the wait's. ``answered`` gets its result, or None when there
    is none to trust (not sent, an error reply, the connection lost): the caller sends it again
    its own way. It is called exactly once, before the wait returns or raises."""

    op: Op[A]
    answered: Callable[[A | None], None]


def supported(client: Any, op: Op[Any]) -> bool:
    """Whether ``client`` can run ``op`` behind a blocking wait: a single-node client (a
    cluster client's pipelines may not keep one connection) and an op without WAIT."""
    return isinstance(client, redis.asyncio.Redis) and op.durable is None


def _parsed(op: Op[A], reply: Any) -> A | None:
    """``op``'s result from its reply, or None for a reply it cannot parse."""
    if reply is None:
        return None
    try:
        return op.parse(reply)
    except Exception:  # a malformed reply: its owner sends the call again and hears why
        return None


class IdleWait:
    def __init__(self, client: Any) -> None:
        self.client = client
        #: The wait's own connection, also the claim loop's for the claims it sends at once.
        self.connection = DirectConnection(client)
        #: Redis's id of the waiting connection, while a wait is under way (for CLIENT UNBLOCK).
        self._blocked_id: asyncio.Future[int] | None = None
        self._interrupted = False
        #: How long the last claim ran after its wait was sent (Redis's clock), in seconds.
        self.waited_s = 0.0

    async def claim_when_ready(self, ready_key: str, op: Op[T], timeout_s: float,
                               ahead: Ahead[Any] | None = None) -> T:
        """Blocks up to ``timeout_s`` until ``ready_key`` holds a job, then runs ``op`` (the
        claim) at once; returns its result, empty if it found nothing. Raises what
        :func:`scripts.run_async` raises. ``ahead`` goes in the same write, before the wait."""
        self.waited_s = 0.0
        if self._interrupted:
            if ahead is not None:
                ahead.answered(None)
            return await self.connection.run(op)
        connection = self.connection
        timeout = max(round(timeout_s, 3), 0.001)
        commands = [("CLIENT", "ID"), ("TIME",),
                    ("BLMOVE", ready_key, ready_key, "RIGHT", "RIGHT", timeout),
                    scripts.evalsha_command(op)]
        if ahead is not None:
            commands.insert(0, scripts.evalsha_command(ahead.op))
        unanswered = ahead
        blocked_id = self._blocked_id = asyncio.get_running_loop().create_future()
        try:
            sent_at = time.monotonic()
            await connection.send(commands)
            if ahead is not None:
                try:
                    ahead_reply = await connection.read()
                except redis.ResponseError:  # NOSCRIPT, or Redis refusing: sent again
                    ahead_reply = None
                unanswered = None
                ahead.answered(_parsed(ahead.op, ahead_reply))
            blocked_id.set_result(int(await connection.read()))
            seconds, micros = await connection.read()
            waited_from_ms = int(seconds) * 1000 + int(micros) // 1000
            socket_timeout = (await connection.connection()).socket_timeout or 0.0
            await connection.read(timeout_s=timeout + socket_timeout)
            wait_replied_at = time.monotonic()
            try:
                reply = await connection.read()
            except redis.ResponseError as exc:
                reply = exc
        except BaseException as exc:
            if unanswered is not None:
                unanswered.answered(None)
            # A half-read connection must never be reused: its next reply would be this one's.
            await connection.drop()
            if isinstance(exc, redis.ConnectionError | redis.TimeoutError):
                raise errors.RedisUnavailable(f"Redis is unreachable: {exc}") from exc
            raise
        finally:
            self._blocked_id = None
            if not blocked_id.done():
                blocked_id.cancel()
        if isinstance(reply, redis.ResponseError) and scripts.is_noscript(reply):
            # The claim runs after the wait's reply came back (this clock: a little later than
            # Redis ended the wait, so leases counted from here are never counted too early).
            self.waited_s = wait_replied_at - sent_at
            return await scripts.run_async(self.client, op)  # EVAL loads it for next time
        result = scripts.parse_reply(op, reply)
        ran_at_ms = getattr(result, "now_ms", None)
        if isinstance(ran_at_ms, int):
            self.waited_s = max(ran_at_ms - waited_from_ms, 0) / 1000
        return result

    async def interrupt(self) -> None:
        """Ends a wait under way as if it had timed out (its claim still runs and replies); the
        waits after it return at once, with only a claim."""
        self._interrupted = True
        blocked_id = self._blocked_id
        if blocked_id is None:
            return
        with contextlib.suppress(Exception):
            await self.client.client_unblock(await blocked_id)

    async def close(self) -> None:
        await self.connection.release()
