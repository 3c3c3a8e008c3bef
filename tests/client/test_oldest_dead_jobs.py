"""Replay and purge of the oldest dead jobs (no ids given), by the sync and the async client.

Covers: dead letters whose record is gone in the first call's batch do not end a replay (they
are dropped from the list, and do not count against the limit); a job replayed by one call that
dies again before a later call is not replayed a second time, while another client purges or
replays the oldest at the same time; a purge of the oldest is not cut short by such letters
either, and deletes no job that dies while it runs (for the first time, or again after another
client replayed it).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import pytest
import redis
import redis.asyncio
from antre import JobStatus
from antre.client import AsyncQueue, Queue
from antre.protocol import scripts
from antre.settings import QueueSettings
from operations import queue_states

QS = QueueSettings(name="q")


def dead_in_order(queue: Queue, count: int) -> list[str]:
    """``count`` jobs dead-lettered through the real scripts; their ids, oldest death first."""
    while count:
        batch = min(count, scripts.MAX_JOBS_PER_CALL)
        queue_states.dead_letters(queue, [("boom", batch)])
        count -= batch
    return list(queue.redis.zrange(QS.keys.dead, 0, -1))


def of_the_oldest(redis_url: str, client: str, action: str, *, limit: int,
                  after_first_call: Callable[[], None] | None = None) -> Any:
    """``replay(limit=limit)`` or ``purge(limit=limit)`` (``action``) of the oldest by the
    ``client`` ("sync" or "async"); ``after_first_call`` runs between its first script call
    and the next, once."""
    hooks = [after_first_call] if after_first_call else []

    if client == "sync":
        with redis.Redis.from_url(redis_url, decode_responses=True) as sync_client:
            queue = Queue(sync_client, settings=QS)
            run = queue._run

            def run_then_hook(op: scripts.Op[Any]) -> Any:
                reply = run(op)
                while hooks:
                    hooks.pop()()
                return reply

            queue._run = run_then_hook  # type: ignore[method-assign]
            return getattr(queue, action)(limit=limit)

    async def in_async() -> Any:
        async_client = redis.asyncio.Redis.from_url(redis_url, decode_responses=True)
        queue = AsyncQueue(async_client, settings=QS)
        run = queue._run

        async def run_then_hook(op: scripts.Op[Any]) -> Any:
            reply = await run(op)
            while hooks:
                hooks.pop()()
            return reply

        queue._run = run_then_hook  # type: ignore[method-assign]
        try:
            return await getattr(queue, action)(limit=limit)
        finally:
            await queue.close()

    return asyncio.run(in_async())


def replay_all(redis_url: str, client: str, *, limit: int,
               after_first_call: Callable[[], None] | None = None) -> list[str]:
    replayed: list[str] = of_the_oldest(redis_url, client, "replay", limit=limit,
                                        after_first_call=after_first_call)
    return replayed


def purge_all(redis_url: str, client: str, *, limit: int,
              after_first_call: Callable[[], None] | None = None) -> int:
    purged: int = of_the_oldest(redis_url, client, "purge", limit=limit,
                                after_first_call=after_first_call)
    return purged


CLIENTS = pytest.mark.parametrize("client", ["sync", "async"])


@CLIENTS
def test_dead_letters_without_a_record_do_not_end_the_replay(redis_client: redis.Redis,
                                                              redis_url: str, client: str) -> None:
    """Before: the first call popped 100 ids and replayed 98 (two records deleted by hand), and
    the client took the shortfall for the end of the list: 148 dead jobs stayed dead."""
    queue = Queue(redis_client, settings=QS)
    dead = dead_in_order(queue, 250)
    gone = [dead[3], dead[60]]
    redis_client.delete(*(QS.keys.job(job_id) for job_id in gone))
    alive = [job_id for job_id in dead if job_id not in gone]

    # The limit counts jobs replayed: the two letters without a record do not use it up.
    assert replay_all(redis_url, client, limit=200) == alive[:200]
    assert redis_client.zrange(QS.keys.dead, 0, -1) == alive[200:]
    assert replay_all(redis_url, client, limit=1000) == alive[200:]
    assert redis_client.zcard(QS.keys.dead) == 0
    assert sorted(redis_client.lrange(QS.keys.ready, 0, -1)) == sorted(alive)
    assert queue.stats().counters["replayed"] == len(alive)


@CLIENTS
@pytest.mark.parametrize("other", ["purge", "replay"])
def test_a_job_that_dies_again_during_the_replay_is_not_replayed_twice(
        redis_client: redis.Redis, redis_url: str, client: str, other: str) -> None:
    """Before: the replay took at most as many as were dead at its start (250). After its first
    call (100 replayed), another client purged or replayed 60 of the oldest and one of the 100
    replayed died again: the second call asked for 100 more, found the 90 left and that job,
    and replayed it a second time."""
    queue = Queue(redis_client, settings=QS)
    dead = dead_in_order(queue, 250)
    died_again: list[str] = []

    def meanwhile() -> None:
        oldest = redis_client.zrange(QS.keys.dead, 0, 59)
        if other == "purge":
            assert queue.purge(oldest) == 60
        else:
            assert sorted(queue.replay(oldest)) == sorted(oldest)
        [lease] = queue_states.claim(queue, 1)  # a job the first call replayed
        assert queue_states.fail(queue, lease, error="again", retry_delay_ms=None) == "dead"
        died_again.append(lease[0])

    replayed = replay_all(redis_url, client, limit=1000, after_first_call=meanwhile)
    [again] = died_again
    assert again in dead[:100]
    taken_by_other = dead[100:160]
    assert replayed == [job_id for job_id in dead if job_id not in taken_by_other]
    assert redis_client.zrange(QS.keys.dead, 0, -1) == [again]
    assert queue.get(again).status == JobStatus.DEAD


@CLIENTS
def test_dead_letters_without_a_record_do_not_end_a_purge(redis_client: redis.Redis,
                                                          redis_url: str, client: str) -> None:
    """A purge counts a letter whose record is gone as purged (the script deletes what is
    left of it), so a call takes as many as it asks for while the list holds them; this passed
    before the replay's fix too, and guards it."""
    queue = Queue(redis_client, settings=QS)
    dead = dead_in_order(queue, 450)
    redis_client.delete(QS.keys.job(dead[5]), QS.keys.job(dead[150]))
    assert purge_all(redis_url, client, limit=1000) == 450
    assert redis_client.zcard(QS.keys.dead) == 0
    assert not any(redis_client.exists(QS.keys.job(job_id)) for job_id in dead)
    assert queue.stats().counters["purged"] == 450


@CLIENTS
def test_jobs_that_die_during_a_purge_of_all_are_not_purged(redis_client: redis.Redis,
                                                             redis_url: str, client: str) -> None:
    """Before: a purge of the oldest popped the oldest until a call found fewer than it asked
    for. After its first call (200 of 450 purged), a job died for the first time, and another
    client replayed 60 of the oldest left, one of which died again: the next calls popped the
    190 left and both of those, which the operator never saw dead, and deleted them for good."""
    queue = Queue(redis_client, settings=QS)
    dead = dead_in_order(queue, 450)
    died: list[str] = []

    def meanwhile() -> None:
        [fresh] = queue_states.dead_letters(queue, [("first death", 1)])
        oldest = redis_client.zrange(QS.keys.dead, 0, 59)
        assert sorted(queue.replay(oldest)) == sorted(oldest)
        [lease] = queue_states.claim(queue, 1)  # a job dead when the purge began
        assert queue_states.fail(queue, lease, error="again", retry_delay_ms=None) == "dead"
        died.extend([fresh, lease[0]])

    assert purge_all(redis_url, client, limit=1000, after_first_call=meanwhile) == 390
    fresh, again = died
    assert again in dead[200:260]
    assert redis_client.zrange(QS.keys.dead, 0, -1) == [fresh, again]
    assert queue.get(fresh).status == queue.get(again).status == JobStatus.DEAD
    replayed = set(dead[200:260]) - {again}
    assert [job_id for job_id in dead if redis_client.exists(QS.keys.job(job_id))] == [
        job_id for job_id in dead if job_id in replayed or job_id == again]
    assert queue.stats().counters["purged"] == 390
