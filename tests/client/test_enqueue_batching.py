"""AsyncQueue.enqueue made concurrently: enqueues share script calls, and each caller still gets
its own result or its own error, once Redis has its job (antre/enqueue_batcher.py).

Against a real redis-server; the script calls are counted from INFO commandstats.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import pytest
import redis
from antre import errors
from antre.client import AsyncQueue
from antre.connection import connect_async
from antre.jobs import EnqueueResult
from antre.protocol.scripts import MAX_JOBS_PER_CALL
from antre.settings import QueueSettings
from invariants import assert_invariants, read_record
from redis_servers import eventually, running_redis, script_calls

QS = QueueSettings(name="batched")


@pytest.fixture
async def queue(redis_url: str, redis_client: redis.Redis) -> AsyncIterator[AsyncQueue]:
    aq = AsyncQueue(connect_async(redis_url), settings=QS)
    await aq.enqueue("warm-up")  # registers the queue and loads the script
    redis_client.flushall()
    yield aq
    await aq.close()


async def test_concurrent_enqueues_share_calls_and_each_get_their_own_job(
        queue: AsyncQueue, redis_client: redis.Redis) -> None:
    count = MAX_JOBS_PER_CALL + 50
    calls_before = script_calls(redis_client)
    results = await asyncio.gather(*(queue.enqueue("t", {"n": n}) for n in range(count)))
    assert script_calls(redis_client) - calls_before == 2  # 200, then the 50 left
    assert all(result.created for result in results)
    assert len({result.job_id for result in results}) == count
    for n, result in enumerate(results):
        assert (await queue.get(result.job_id)).payload == {"n": n}
    # In the order of the calls, as separate calls would have left them (LPUSH: newest left).
    assert redis_client.lrange(QS.keys.ready, 0, -1) == [r.job_id for r in reversed(results)]
    assert_invariants(redis_client, QS)


async def test_an_idempotency_key_twice_in_one_batch_behaves_as_two_calls_in_a_row(
        queue: AsyncQueue, redis_client: redis.Redis) -> None:
    calls_before = script_calls(redis_client)
    first, second, other = await asyncio.gather(
        queue.enqueue("t", {"a": 1}, idempotency_key="k"),
        queue.enqueue("t", {"a": 1}, idempotency_key="k"),
        queue.enqueue("t", {"b": 2}))
    assert script_calls(redis_client) - calls_before == 1
    assert first.created and other.created
    assert second == EnqueueResult(job_id=first.job_id, created=False)
    assert redis_client.llen(QS.keys.ready) == 2
    # The same two calls one after the other answer alike.
    redis_client.flushall()
    first = await queue.enqueue("t", {"a": 1}, idempotency_key="k")
    assert await queue.enqueue("t", {"a": 1}, idempotency_key="k") == EnqueueResult(
        job_id=first.job_id, created=False)
    assert_invariants(redis_client, QS)


async def test_a_refused_job_fails_only_its_own_caller(
        queue: AsyncQueue, redis_client: redis.Redis) -> None:
    kept = await queue.enqueue("t", {"a": 1}, idempotency_key="k")
    redis_client.hset(QS.keys.idempotency("wrong-type"), "x", "1")
    results = await asyncio.gather(
        queue.enqueue("t", {"n": 0}),
        queue.enqueue("t", {"a": 2}, idempotency_key="k"),  # reused for another payload
        queue.enqueue("t", {"n": 1}),
        queue.enqueue("t", {"n": 2}, idempotency_key="wrong-type"),  # a key that is a Hash
        queue.enqueue("t", payload=object()),  # refused before it joins a batch
        queue.enqueue("t", {"n": 3}),
        return_exceptions=True)
    assert isinstance(results[1], errors.IdempotencyConflict)
    assert kept.job_id in str(results[1])
    assert isinstance(results[3], errors.InvalidArgument) and "wrong Redis type" in str(results[3])
    assert isinstance(results[4], errors.InvalidArgument) and "payload" in str(results[4])
    written = [results[i] for i in (0, 2, 5)]
    assert all(isinstance(r, EnqueueResult) and r.created for r in written)
    for n, result in zip((0, 1, 3), written, strict=True):
        assert (await queue.get(result.job_id)).payload == {"n": n}  # type: ignore[union-attr]
    assert redis_client.llen(QS.keys.ready) == 4  # kept + the three
    redis_client.delete(QS.keys.idempotency("wrong-type"))
    assert_invariants(redis_client, QS)


async def test_a_redis_error_reaches_every_caller_of_the_batch() -> None:
    with running_redis("--maxmemory-policy", "noeviction") as server:
        client = redis.Redis.from_url(server.url, decode_responses=True)
        aq = AsyncQueue(connect_async(server.url), settings=QS)
        try:
            await aq.enqueue("warm-up")
            used = int(client.info("memory")["used_memory"])
            client.config_set("maxmemory", str(used - 1024))  # full from now on
            calls_before = script_calls(client)
            results = await asyncio.gather(*(aq.enqueue("t", {"n": n}) for n in range(20)),
                                           return_exceptions=True)
            assert script_calls(client) - calls_before == 1
            assert all(isinstance(r, errors.RedisRefused) for r in results), results
            client.config_set("maxmemory", "0")
            assert client.llen(QS.keys.ready) == 1  # the warm-up job only
            # Once Redis has room again, the next enqueues go through.
            again = await asyncio.gather(*(aq.enqueue("t") for _ in range(3)))
            assert all(r.created for r in again) and client.llen(QS.keys.ready) == 4
        finally:
            await aq.close()
            client.close()


async def test_producers_enqueuing_while_calls_are_in_flight_lose_nothing(
        queue: AsyncQueue, redis_client: redis.Redis) -> None:
    async def producer(name: str) -> list[EnqueueResult]:
        return [await queue.enqueue("t", {"producer": name, "n": n}) for n in range(150)]

    calls_before = script_calls(redis_client)
    per_producer = await asyncio.gather(*(producer(f"p{i}") for i in range(8)))
    calls = script_calls(redis_client) - calls_before
    ids = [r.job_id for results in per_producer for r in results]
    assert len(set(ids)) == 8 * 150
    assert set(redis_client.lrange(QS.keys.ready, 0, -1)) == set(ids)
    assert calls < 8 * 150 / 4, f"{calls} script calls for {8 * 150} enqueues"
    for i, results in enumerate(per_producer):  # each producer's jobs in its own order
        ranks = [redis_client.lpos(QS.keys.ready, r.job_id) for r in results]
        assert ranks == sorted(ranks, reverse=True), f"producer p{i}"
    assert_invariants(redis_client, QS)


async def test_a_caller_cancelled_before_its_batch_went_out_is_not_enqueued(
        queue: AsyncQueue, redis_client: redis.Redis) -> None:
    cancelled = asyncio.create_task(queue.enqueue("t", {"n": 0}))
    await asyncio.sleep(0)  # it joins the batch; the call is not sent yet
    cancelled.cancel()
    kept = await queue.enqueue("t", {"n": 1})
    with pytest.raises(asyncio.CancelledError):
        await cancelled
    assert redis_client.lrange(QS.keys.ready, 0, -1) == [kept.job_id]


async def test_a_caller_cancelled_while_its_refused_batch_was_in_flight_is_not_enqueued(
        queue: AsyncQueue, redis_client: redis.Redis) -> None:
    """A batch Redis refuses (one job's idempotency conflict) wrote nothing, and its jobs are
    then sent again one per call: a caller cancelled meanwhile (a request's timeout) has been
    answered already, so its job must not be written after it was told it failed."""
    await queue.enqueue("t", {"a": 1}, idempotency_key="k")
    redis_client.execute_command("CLIENT", "PAUSE", "300", "WRITE")  # the batch waits in Redis
    conflicting = asyncio.create_task(queue.enqueue("t", {"a": 2}, idempotency_key="k"))
    cancelled = asyncio.create_task(queue.enqueue("t", {"n": 0}))
    await eventually(lambda: any(client["cmd"] == "evalsha" and "b" in client["flags"]
                                 for client in redis_client.client_list()),
                     message="the batch sent, held by the pause")
    cancelled.cancel()
    with pytest.raises(errors.IdempotencyConflict):
        await conflicting
    with pytest.raises(asyncio.CancelledError):
        await cancelled
    await queue.close()  # every job of the batch answered and sent
    assert redis_client.llen(QS.keys.ready) == 1, "only the first job of key k"
    assert_invariants(redis_client, QS)


async def test_durable_queue_not_replicated_names_each_callers_own_job(
        redis_url: str, redis_client: redis.Redis) -> None:
    durable = QueueSettings(name="batched", durable_replicas=1, durable_timeout_s=0.05)
    aq = AsyncQueue(connect_async(redis_url), settings=durable)
    try:
        results: list[Any] = await asyncio.gather(*(aq.enqueue("t", {"n": n}) for n in range(5)),
                                                  return_exceptions=True)
    finally:
        await aq.close()
    assert all(isinstance(r, errors.NotReplicated) for r in results), results
    ids = [r.result.job_id for r in results]
    assert len(set(ids)) == 5
    for n, (job_id, exc) in enumerate(zip(ids, results, strict=True)):
        assert job_id in str(exc) and "idempotency key" in str(exc)
        assert read_record(redis_client, QS, job_id)["payload"] == f'{{"n":{n}}}'


async def test_close_waits_for_the_enqueues_of_its_batches(
        queue: AsyncQueue, redis_client: redis.Redis) -> None:
    pending = [asyncio.create_task(queue.enqueue("t")) for _ in range(10)]
    await asyncio.sleep(0)  # they joined a batch; nothing is sent yet
    assert redis_client.llen(QS.keys.ready) == 0
    await queue.close()
    assert all(task.done() and task.result().created for task in pending)
    assert redis_client.llen(QS.keys.ready) == 10


async def test_close_waits_for_an_enqueue_many_to_its_last_call(
        queue: AsyncQueue, redis_client: redis.Redis) -> None:
    """close() during an enqueue_many of many script calls: before, the calls left failed on
    the closed connection ("Redis is unreachable"), with the first calls' jobs written and not
    reported. Now close() returns once the last call has its answer."""
    count = MAX_JOBS_PER_CALL * 50
    many = asyncio.create_task(queue.enqueue_many([("t", {"n": n}) for n in range(count)]))
    await eventually(lambda: redis_client.llen(QS.keys.ready) > 0, message="the first call")
    assert not many.done(), "close() must meet the enqueue_many halfway"
    await queue.close()
    assert many.done()
    assert len(many.result()) == count and all(result.created for result in many.result())
    assert redis_client.llen(QS.keys.ready) == count


def _jobs_with_a_conflict_at(position: int, count: int) -> list[Any]:
    jobs: list[Any] = [("t", {"n": n}) for n in range(count)]
    jobs[position - 1] = {"type": "t", "payload": {"n": "another"}, "idempotency_key": "K"}
    return jobs


async def test_a_refused_later_call_names_the_job_in_the_whole_list_and_what_was_written(
        queue: AsyncQueue, redis_client: redis.Redis) -> None:
    """enqueue_many writes 200 jobs per script call; Redis refuses a call whose job reuses an
    idempotency key for another payload, after the calls before it were written."""
    from antre import Queue

    sync = Queue(redis_client, settings=QS)
    sync.enqueue("t", {"n": "first"}, idempotency_key="K")
    for enqueue_many in (sync.enqueue_many, queue.enqueue_many):
        before = redis_client.llen(QS.keys.ready)
        with pytest.raises(errors.IdempotencyConflict) as caught:
            result = enqueue_many(_jobs_with_a_conflict_at(250, 300))
            if asyncio.iscoroutine(result):
                await result
        message = str(caught.value)
        assert message.startswith("job 250: idempotency key K was used for job ")
        assert "the calls before it wrote the first 200" in message
        assert len(message.splitlines()) == 1
        written = caught.value.enqueued
        assert len(written) == MAX_JOBS_PER_CALL and all(r.created for r in written)
        assert redis_client.llen(QS.keys.ready) == before + MAX_JOBS_PER_CALL
        assert [read_record(redis_client, QS, r.job_id)["status"] for r in written[::50]] == [
            "queued"] * 4

    # Refused in the first call: nothing written, the message as Redis gave it.
    with pytest.raises(errors.IdempotencyConflict) as caught:
        sync.enqueue_many(_jobs_with_a_conflict_at(150, 300))
    assert str(caught.value).startswith("job 150: ") and caught.value.enqueued == ()
    assert_invariants(redis_client, QS)
