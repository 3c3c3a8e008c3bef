"""The Python client refuses bad arguments before it writes anything, with one line naming the
argument, the value and what is allowed (review findings); replays and purges of many dead jobs
go in calls that each keep Redis busy briefly."""

from __future__ import annotations

import asyncio
import subprocess
import sys

import pytest
import redis
import redis.asyncio
from antre import errors
from antre.client import AsyncQueue, Queue, _PurgeOfTheOldest
from antre.protocol.purge import OldestPurged
from antre.settings import QueueSettings
from redis_servers import child_env

QS = QueueSettings(name="q")


def seed_dead(client: redis.Redis, count: int) -> list[str]:
    """``count`` dead jobs, oldest first, as the real scripts leave them."""
    queue = Queue(client, settings=QS)
    ids = [result.job_id for result in queue.enqueue_many([("t", {"n": n}) for n in range(count)])]
    for n, job_id in enumerate(ids):
        client.hset(QS.keys.job(job_id), "status", "dead")  # a Hash: no worker registered
        client.zadd(QS.keys.dead, {job_id: n})
    client.delete(QS.keys.ready)
    return ids


def test_a_bad_id_late_in_a_purge_list_purges_nothing(redis_client: redis.Redis) -> None:
    """Before: the first call of 200 ids purged its dead jobs for good, then a raw
    UnicodeEncodeError escaped for an id in the second call, with no count returned."""
    dead = seed_dead(redis_client, 10)
    queue = Queue(redis_client, settings=QS)
    for bad in ("\ud800", None, "a:b", "x" * 129, "", "é" * 65):
        ids = [*dead, *[f"unknown-{n}" for n in range(190)], bad]
        with pytest.raises(errors.InvalidArgument, match=r"^ids: got .*; must be a job id"):
            queue.purge(ids)
        with pytest.raises(errors.InvalidArgument, match=r"^ids: got .*; must be a job id"):
            queue.replay(ids)
    assert redis_client.zcard(QS.keys.dead) == 10


@pytest.mark.parametrize("call", ["get", "cancel"])
def test_a_single_bad_id_is_named(redis_client: redis.Redis, call: str) -> None:
    queue = Queue(redis_client, settings=QS)
    with pytest.raises(errors.InvalidArgument) as refused:
        getattr(queue, call)("\ud800")
    assert str(refused.value) == ("job_id: got '\\ud800'; must be a job id: 1-128 bytes of text "
                                  "without ':', '|', spaces or control characters")


@pytest.mark.parametrize(("kwargs", "message"), [
    ({"limit": 0}, "limit: got 0; must be an integer >= 1"),
    ({"limit": -1}, "limit: got -1; must be an integer >= 1"),
    ({"limit": True}, "limit: got True; must be an integer >= 1"),
    ({"offset": -1}, "offset: got -1; must be an integer >= 0"),
])
def test_dead_letter_pages_refuse_a_bad_limit_or_offset(redis_client: redis.Redis, kwargs: dict,
                                                         message: str) -> None:
    """Before: limit=0 listed every dead job and limit=-1 all but one."""
    seed_dead(redis_client, 3)
    with pytest.raises(errors.InvalidArgument) as refused:
        Queue(redis_client, settings=QS).dead_letters(**kwargs)
    assert str(refused.value) == message


@pytest.mark.parametrize(("limit", "offset", "shown"), [
    (10**20, 0, 3), (2**63, 0, 3), (2, 2**63 - 1, 0), (5, 2**64, 0), (1, 2, 1),
])
def test_a_dead_letter_page_past_what_redis_indexes_is_read(redis_client: redis.Redis,
                                                             redis_url: str, limit: int,
                                                             offset: int, shown: int) -> None:
    """Before: a limit or offset whose last index was past 2**63 - 1 (``limit=10**20``, an
    integer >= 1 as the check asks) reached Redis, which refused it with a raw ResponseError
    ("value is not an integer or out of range"); ``antre dlq list --limit`` exited 69 as if
    Redis had refused a command."""
    seed_dead(redis_client, 3)
    assert len(Queue(redis_client, settings=QS).dead_letters(limit=limit, offset=offset)) == shown

    async def read_async() -> int:
        client = redis.asyncio.Redis.from_url(redis_url, decode_responses=True)
        try:
            return len(await AsyncQueue(client, settings=QS).dead_letters(limit=limit,
                                                                           offset=offset))
        finally:
            await client.aclose()

    assert asyncio.run(read_async()) == shown


@pytest.mark.parametrize("call", ["replay", "purge"])
def test_replay_and_purge_refuse_a_limit_below_one(redis_client: redis.Redis, call: str) -> None:
    seed_dead(redis_client, 3)
    with pytest.raises(errors.InvalidArgument, match=r"^limit: got -1; must be an integer >= 1$"):
        getattr(Queue(redis_client, settings=QS), call)(limit=-1)
    assert redis_client.zcard(QS.keys.dead) == 3


def test_a_large_limit_goes_in_calls_of_100(redis_client: redis.Redis) -> None:
    """A replay of the 450 oldest used to be one script call popping all of them (one call of a
    million would hold Redis for seconds); a replay's calls take 100 (a purge's 200)."""
    seed_dead(redis_client, 500)
    queue = Queue(redis_client, settings=QS)
    assert queue.replay(["none-such"]) == []  # the script is loaded: every call below is one
    redis_client.config_resetstat()
    replayed = queue.replay(limit=450)
    assert len(replayed) == 450 and redis_client.zcard(QS.keys.dead) == 50
    calls = redis_client.info("commandstats")
    assert sum(calls.get(f"cmdstat_{name}", {}).get("calls", 0) for name in ("evalsha", "eval")) == 5
    assert queue.purge(limit=1000) == 50  # stops at the call that found fewer
    assert redis_client.zcard(QS.keys.dead) == 0


def test_a_purge_limit_far_past_the_dead_letters_costs_only_the_calls_made(
        redis_client: redis.Redis, redis_url: str) -> None:
    """Before: a purge of the ``limit`` oldest built the size of every call up front, one per
    200 of the limit: ``purge(limit=10**12)`` (an integer >= 1, as the check asks) filled the
    memory until MemoryError, and ``limit=10**9`` took seconds for 3 dead jobs. Run in a child
    held to 256 MiB of address space, so the old behaviour fails there and not here."""
    seed_dead(redis_client, 3)
    code = (
        "import asyncio, resource, sys\n"
        "import redis, redis.asyncio\n"
        "from antre.client import AsyncQueue, Queue\n"
        "from antre.settings import QueueSettings\n"
        "resource.setrlimit(resource.RLIMIT_AS, (1 << 28, 1 << 28))\n"
        "qs = QueueSettings(name='q')\n"
        "sync = Queue(redis.Redis.from_url(sys.argv[1], decode_responses=True), settings=qs)\n"
        "print(sync.purge(limit=10**12))\n"
        "async def purge_async():\n"
        "    client = redis.asyncio.Redis.from_url(sys.argv[1], decode_responses=True)\n"
        "    try:\n"
        "        return await AsyncQueue(client, settings=qs).purge(limit=10**18)\n"
        "    finally:\n"
        "        await client.aclose()\n"
        "print(asyncio.run(purge_async()))\n")
    proc = subprocess.run([sys.executable, "-c", code, redis_url], capture_output=True,
                          text=True, env=child_env(), timeout=60, check=False)
    assert (proc.returncode, proc.stdout) == (0, "3\n0\n"), proc.stderr
    assert redis_client.zcard(QS.keys.dead) == 0


def test_async_queue_checks_alike(redis_url: str, redis_client: redis.Redis) -> None:
    dead = seed_dead(redis_client, 5)

    async def go() -> None:
        client = redis.asyncio.Redis.from_url(redis_url, decode_responses=True)
        queue = AsyncQueue(client, settings=QS)
        try:
            with pytest.raises(errors.InvalidArgument, match=r"^ids: got '\\ud800'; must be a job id"):
                await queue.purge([*dead, "\ud800"])
            with pytest.raises(errors.InvalidArgument, match=r"^limit: got 0; must be"):
                await queue.dead_letters(limit=0)
            with pytest.raises(errors.InvalidArgument, match=r"^job_id: got 'a\|b'; must be"):
                await queue.cancel("a|b")
            assert sorted(await queue.replay(limit=3)) == sorted(dead[:3])
            assert await queue.purge(limit=10) == 2
        finally:
            await client.aclose()

    asyncio.run(go())
    assert redis_client.zcard(QS.keys.dead) == 0


def test_a_client_that_answers_bytes_is_refused(redis_url: str) -> None:
    """Before: ids came back as "b'1a23...'", which no later call could find."""
    with redis.Redis.from_url(redis_url) as raw:
        with pytest.raises(errors.InvalidArgument, match=r"^redis_client: got a client that "
                                                         r"returns bytes; create it with "
                                                         r"decode_responses=True"):
            Queue(raw, "q")
        assert raw.dbsize() == 0


@pytest.mark.parametrize(("kwargs", "field"), [({"name": ""}, "queue"),
                                               ({"name": "q", "prefix": ""}, "prefix")])
def test_an_empty_name_or_prefix_is_refused_not_replaced(redis_client: redis.Redis,
                                                         kwargs: dict, field: str) -> None:
    """Before: Queue(r, "") wrote to the queue 'default' and prefix="" became 'antre'."""
    with pytest.raises(errors.InvalidArgument, match=f"^{field}: got ''; must be"):
        Queue(redis_client, **kwargs)


def test_a_purge_of_the_oldest_goes_in_calls_of_200_up_to_the_limit() -> None:
    """Each call asks for what is left of the limit, at most 200, and passes on the cutoff the
    first call answered; a call that purged fewer than it asked for ends the purge. The
    replay of the oldest, which must not replay a job twice, is in test_oldest_dead_jobs.py."""

    def calls(limit: int, found: int) -> list[tuple[int, str]]:
        purge, sent, left = _PurgeOfTheOldest(QS, limit), [], found
        while (op := purge.next_op()) is not None:
            asked, cutoff = op.args[2], op.args[3]
            assert isinstance(asked, int) and isinstance(cutoff, str)
            sent.append((asked, cutoff))
            purge.took(OldestPurged(purged=min(asked, left), cutoff="1700000000000000"))
            left -= min(asked, left)
        assert purge.done == min(limit, found)
        return sent

    later = "1700000000000000"
    assert calls(450, found=1000) == [(200, ""), (200, later), (50, later)]
    assert calls(1000, found=250) == [(200, ""), (200, later)]
    assert calls(1, found=5) == [(1, "")]
    with pytest.raises(errors.InvalidArgument, match=r"^limit: got 0"):
        _PurgeOfTheOldest(QS, 0)
