"""The operator's event loop: a Redis host name that hangs in DNS holds up no other JobQueue.

DNS that hangs cannot be made here (the resolver's nameservers come from /etc/resolv.conf, and
this machine's answers at once), so ``socket.getaddrinfo`` is replaced for names ending in
``.hangs.test``: their lookups block until the test ends, as lookups do against a nameserver
that drops queries. Every other name is looked up for real, and the reads go to a real
redis-server through the operator's own reader.
"""

from __future__ import annotations

import asyncio
import os
import socket
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any
from urllib.parse import urlsplit

import pytest
from antre_operator import resolver
from antre_operator.backlog import QueueReader, RedisReadError
from antre_operator.resolver import LOOKUP_THREADS, LOOKUPS_PER_JOBQUEUE, ResolvingLoop

HANGS = ".hangs.test"


class HangingDns:
    """``socket.getaddrinfo`` for the test: names ending in ``.hangs.test`` block until
    :meth:`release`; ``blocked`` counts the lookups blocked at once."""

    def __init__(self, real: Callable[..., Any]) -> None:
        self.real = real
        self.released = threading.Event()
        self.blocked = 0
        self._lock = threading.Lock()

    def __call__(self, host: Any, *args: Any, **kwargs: Any) -> Any:
        if isinstance(host, str) and host.endswith(HANGS):
            with self._lock:
                self.blocked += 1
            self.released.wait()
            raise socket.gaierror(socket.EAI_AGAIN, "Temporary failure in name resolution")
        return self.real(host, *args, **kwargs)

    def release(self) -> None:
        self.released.set()


@pytest.fixture
def dns(monkeypatch: pytest.MonkeyPatch) -> Iterator[HangingDns]:
    hanging = HangingDns(socket.getaddrinfo)
    monkeypatch.setattr(socket, "getaddrinfo", hanging)
    try:
        yield hanging
    finally:
        hanging.release()


def in_operator_loop(scenario: Callable[[], Any]) -> Any:
    with asyncio.Runner(loop_factory=ResolvingLoop) as runner:
        return runner.run(scenario())


async def give_up_after(seconds: float, awaitable: Any) -> None:
    with pytest.raises((TimeoutError, RedisReadError)):
        await asyncio.wait_for(awaitable, seconds)


def test_a_hanging_name_holds_one_thread_whatever_its_callers_do(dns: HangingDns) -> None:
    async def scenario() -> None:
        loop = asyncio.get_running_loop()
        names = [f"redis-{n}{HANGS}" for n in range(5)]
        # Each name asked for 20 times over, every caller giving up (as a poll's timeout does),
        # and asked again after that.
        for _ in range(2):
            await asyncio.gather(*(give_up_after(0.05, loop.getaddrinfo(name, 6379))
                                   for name in names for _ in range(20)))
        assert dns.blocked == len(names)
        # One name on many ports (a Sentinel URL lists several): still one lookup.
        await asyncio.gather(*(give_up_after(0.05, loop.getaddrinfo(names[0], port))
                               for port in range(1, LOOKUP_THREADS + 10)))
        assert dns.blocked == len(names)
        # A name that answers is looked up at once, as the system would answer it, the port
        # in its addresses whether it was given as a number or as text.
        for port in (6379, "6379", None):
            found = await asyncio.wait_for(
                loop.getaddrinfo("localhost", port, type=socket.SOCK_STREAM), 5)
            assert found == dns.real("localhost", port, type=socket.SOCK_STREAM)
        # No host: this host's own addresses, as a server binding every interface asks.
        passive = {"type": socket.SOCK_STREAM, "flags": socket.AI_PASSIVE}
        assert await loop.getaddrinfo(None, 8080, **passive) == dns.real(None, 8080, **passive)

    in_operator_loop(scenario)


def healthy_read_beside_hanging_names(dns: HangingDns, redis_url: str, hanging_queues: int, *,
                                      polls: int, within_s: float) -> None:
    """``hanging_queues`` JobQueues whose host names hang in DNS are each polled ``polls``
    times (each poll given up after its timeout, the lookup left hanging); a healthy JobQueue
    then reads its Redis within ``within_s``, and each name hung once."""
    port = urlsplit(redis_url).port

    async def scenario() -> None:
        stuck = [QueueReader(f"redis://queue-{n}{HANGS}:6379", queue="q", prefix="antre",
                             timeout_s=0.05) for n in range(hanging_queues)]
        healthy = QueueReader(f"redis://localhost:{port}", queue="q", prefix="antre",
                              timeout_s=within_s)
        try:
            for _ in range(polls):
                await asyncio.gather(*(give_up_after(1, reader.read()) for reader in stuck))
            started = time.monotonic()
            reading = await healthy.read()
            assert reading.numbers.ready == 0
            assert time.monotonic() - started < within_s
            assert dns.blocked == hanging_queues
        finally:
            for reader in [*stuck, healthy]:
                await reader.close()

    in_operator_loop(scenario)


def test_a_queue_whose_host_hangs_in_dns_holds_up_no_other(dns: HangingDns,
                                                          redis_url: str) -> None:
    # More JobQueues with hanging names than asyncio's default executor has threads (6 on two
    # cores), each polled several times: with that executor, the healthy queue's lookup of
    # "localhost" would wait behind them until a lookup ended.
    default_threads = min(32, (os.cpu_count() or 1) + 4)
    hanging_queues = min(3 * default_threads, LOOKUP_THREADS - 1)
    assert hanging_queues > default_threads
    healthy_read_beside_hanging_names(dns, redis_url, hanging_queues, polls=3, within_s=5)


def test_more_hanging_names_than_the_old_threads_hold_up_no_other_jobqueue(
        dns: HangingDns, redis_url: str) -> None:
    """The review's finding: the lookups were shared by name, but each name hanging took one of
    64 threads, so 64 JobQueues of one author (their own DNS zone) starved every other
    JobQueue's lookup: 70 of them made a healthy JobQueue's read time out. The threads for
    JobQueues' lookups now start as needed, one JobQueue holding at most a few."""
    healthy_read_beside_hanging_names(dns, redis_url, 100, polls=2, within_s=2)


def test_one_jobqueue_holds_a_few_lookups_however_many_names_it_has(dns: HangingDns) -> None:
    """One JobQueue's names (a Sentinel URL of many hosts, or a Sentinel of the author's own
    naming a new host at every poll) hold at most LOOKUPS_PER_JOBQUEUE threads: a further
    lookup of that JobQueue's fails at once, as a name that does not resolve does."""
    names = 3 * LOOKUPS_PER_JOBQUEUE

    async def scenario() -> None:
        readers = [QueueReader(f"redis://host-{n}{HANGS}:6379", queue="q", prefix="antre",
                               timeout_s=0.05, jobqueue=("team-a", "many-names"))
                   for n in range(names)]
        try:
            errors = await asyncio.gather(*(reader.read() for reader in readers),
                                          return_exceptions=True)
            assert dns.blocked == LOOKUPS_PER_JOBQUEUE
            refused = [error for error in errors if isinstance(error, RedisReadError)
                       and "not looked up" in error.detail]
            assert len(refused) == names - LOOKUPS_PER_JOBQUEUE, errors
        finally:
            for reader in readers:
                await reader.close()

    in_operator_loop(scenario)


def test_lookups_of_no_jobqueue_have_threads_no_jobqueue_takes(
        dns: HangingDns, monkeypatch: pytest.MonkeyPatch) -> None:
    """kopf's lookups (the API server's name) are made for no JobQueue: they go on while every
    thread for JobQueues' lookups hangs."""
    monkeypatch.setattr(resolver, "LOOKUP_THREADS", 2 * LOOKUPS_PER_JOBQUEUE)

    async def scenario() -> None:
        loop = asyncio.get_running_loop()
        for jobqueue in range(2):
            with resolver.lookups_for(jobqueue):
                await asyncio.gather(*(
                    give_up_after(0.05, loop.getaddrinfo(f"{jobqueue}-{n}{HANGS}", 6379))
                    for n in range(LOOKUPS_PER_JOBQUEUE)))
        assert dns.blocked == resolver.LOOKUP_THREADS
        found = await asyncio.wait_for(loop.getaddrinfo("localhost", 443), 5)
        assert found == dns.real("localhost", 443)

    in_operator_loop(scenario)
