"""Queue's script calls on its pinned connection (antre/pinned_connection.py): the
same answers as redis-py's own path, from many threads, across a dropped connection, a SCRIPT
FLUSH and a fork, and one clear error when Redis is gone.

Against a real redis-server.
"""

from __future__ import annotations

import gc
import os
import signal
import threading
from collections.abc import Iterator

import pytest
import redis
from antre import errors
from antre.client import Queue
from antre.connection import connect
from antre.settings import QueueSettings
from invariants import assert_invariants
from redis_servers import free_port, running_redis, script_calls

QS = QueueSettings(name="pinned")


@pytest.fixture
def queue(redis_url: str, redis_client: redis.Redis) -> Iterator[Queue]:
    q = Queue(connect(redis_url), settings=QS)
    yield q
    q.close()


def test_one_connection_serves_every_call_of_one_thread(
        queue: Queue, redis_client: redis.Redis) -> None:
    results = [queue.enqueue("t", {"n": n}) for n in range(50)]
    assert len({r.job_id for r in results}) == 50 and all(r.created for r in results)
    pool = queue.redis.connection_pool
    assert len(pool._in_use_connections) == 1  # the pinned one; nothing taken per call
    assert queue.get(results[7].job_id).payload == {"n": 7}
    assert queue.stats().ready == 50  # other script calls take the same path
    assert_invariants(redis_client, QS)


def test_threads_enqueue_at_once_and_each_gets_its_own_job(
        queue: Queue, redis_client: redis.Redis) -> None:
    ids: list[list[str]] = [[] for _ in range(8)]

    def produce(i: int) -> None:
        ids[i].extend(queue.enqueue("t", {"thread": i, "n": n}).job_id for n in range(100))

    threads = [threading.Thread(target=produce, args=(i,)) for i in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    every = [job_id for per_thread in ids for job_id in per_thread]
    assert len(set(every)) == 800
    assert set(redis_client.lrange(QS.keys.ready, 0, -1)) == set(every)
    assert_invariants(redis_client, QS)


def test_a_dropped_connection_is_dialled_again_and_the_job_written_once(
        queue: Queue, redis_client: redis.Redis) -> None:
    first = queue.enqueue("t")
    assert redis_client.client_kill_filter(_type="normal", skipme=True) >= 1
    second = queue.enqueue("t", {"after": "kill"})
    assert second.created and second.job_id != first.job_id
    assert redis_client.lrange(QS.keys.ready, 0, -1) == [second.job_id, first.job_id]


def test_after_script_flush_the_script_is_loaded_again(
        queue: Queue, redis_client: redis.Redis) -> None:
    queue.enqueue("t")
    redis_client.script_flush()
    result = queue.enqueue("t", {"x": 1}, idempotency_key="k")
    assert result.created
    assert queue.enqueue("t", {"x": 1}, idempotency_key="k").job_id == result.job_id
    with pytest.raises(errors.IdempotencyConflict):  # script errors arrive as ours
        queue.enqueue("t", {"x": 2}, idempotency_key="k")
    assert_invariants(redis_client, QS)


def test_a_forked_child_uses_a_connection_of_its_own(queue: Queue, redis_client: redis.Redis) -> None:
    parent_job = queue.enqueue("t", {"who": "parent"})
    pid = os.fork()
    if pid == 0:  # the child: enqueue through the inherited Queue, report by exit status
        try:
            queue.enqueue("t", {"who": "child"})
        finally:
            os._exit(0 if len(redis_client.lrange(QS.keys.ready, 0, -1)) == 2 else 1)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    again = queue.enqueue("t", {"who": "parent again"})  # the parent's socket still in step
    assert again.created
    payloads = sorted(queue.get(job_id).payload["who"]
                      for job_id in redis_client.lrange(QS.keys.ready, 0, -1))
    assert payloads == ["child", "parent", "parent again"]
    assert parent_job.created


def test_redis_gone_is_one_clear_error() -> None:
    with running_redis() as server:
        q = Queue(connect(server.url, retry=None), settings=QS)
        q.enqueue("t")
        server.kill()
        with pytest.raises(errors.RedisUnavailable, match="Redis is unreachable"):
            q.enqueue("t")
        q.close()
    port = free_port()
    q = Queue(connect(f"redis://127.0.0.1:{port}/0", retry=None), settings=QS)
    with pytest.raises(errors.RedisUnavailable, match="Redis is unreachable"):
        q.enqueue("t")
    q.close()


def test_script_calls_are_counted_as_one_per_enqueue(queue: Queue, redis_client: redis.Redis) -> None:
    queue.enqueue("t")
    before = script_calls(redis_client)
    for _ in range(10):
        queue.enqueue("t")
    assert script_calls(redis_client) - before == 10


def test_queues_made_and_dropped_on_a_shared_client_give_their_connection_back(
        redis_url: str, redis_client: redis.Redis) -> None:
    """Given back when the Queue is dropped, not at the next garbage collection: also after
    a call whose reply was an error (a script to load again, a refused job), which must leave
    no reference cycle behind."""
    shared = connect(redis_url)
    redis_client.script_flush()  # the first call's reply is NOSCRIPT, whatever ran before
    gc.disable()
    try:
        for _ in range(50):  # one Queue per request, never closed
            Queue(shared, settings=QS).enqueue("t", {"order": 1}, idempotency_key="order-1")
        for n in range(5):  # the key names a job of another payload: an error reply
            with pytest.raises(errors.IdempotencyConflict):
                Queue(shared, settings=QS).enqueue("t", {"other": n}, idempotency_key="order-1")
        pool = shared.connection_pool
        assert len(pool._in_use_connections) == 0
        assert len(pool._available_connections) == 2  # the pinned one, and the one EVAL took
        closed = Queue(shared, settings=QS)
        closed.enqueue("t")
        closed.close()
        assert closed.enqueue("t").created  # a call after close() takes one again
    finally:
        gc.enable()
        shared.close()
    assert redis_client.llen(QS.keys.ready) == 3


def test_the_connection_is_driven_directly_and_a_reply_spanning_many_reads_arrives_whole(
        queue: Queue) -> None:
    job = queue.enqueue("t", {"blob": "x" * 250_000})  # get(): a reply of several reads
    assert queue._pinned._direct, "a plain TCP connection with hiredis is driven directly"
    assert queue.get(job.job_id).payload == {"blob": "x" * 250_000}
    assert queue.enqueue("t").created  # the reader holds nothing of the last reply


def test_a_due_health_check_pings_before_the_call(redis_url: str,
                                                  redis_client: redis.Redis) -> None:
    q = Queue(connect(redis_url, health_check_interval=30), settings=QS)
    try:
        q.enqueue("t")
        pings = redis_client.info("commandstats").get("cmdstat_ping", {}).get("calls", 0)
        q.enqueue("t")  # within the interval: no PING
        q._pinned._connection.next_health_check = 0  # idle past the interval
        assert q.enqueue("t").created
        after = redis_client.info("commandstats")["cmdstat_ping"]["calls"]
        assert after == pings + 1
    finally:
        q.close()


def test_a_reply_that_times_out_is_never_read_as_a_later_calls_reply() -> None:
    """A call whose reply does not come within the socket timeout (a frozen server) fails with
    one clear error and closes the connection: its late reply must not answer the next call."""
    with running_redis() as server:
        assert server.process is not None
        q = Queue(connect(server.url, socket_timeout=0.5, retry=None), settings=QS)
        try:
            q.enqueue("t", {"n": 0})
            server.process.send_signal(signal.SIGSTOP)
            try:
                with pytest.raises(errors.RedisUnavailable, match="Redis is unreachable"):
                    q.enqueue("t", {"n": 1})
            finally:
                server.process.send_signal(signal.SIGCONT)
            later = q.enqueue("t", {"n": 2})
            assert later.created
            assert q.get(later.job_id).payload == {"n": 2}
        finally:
            q.close()


def test_a_connection_caught_half_disconnected_by_another_thread_is_dialled_again(
        queue: Queue) -> None:
    """``disconnect()`` clears the parser's reader before the socket (redis-py's order): a
    shared client closed by another thread (``pool.disconnect()``) can leave the pinned
    connection in that state for the next call, which must dial again, as redis-py's own
    ``can_read`` and ``read_from_socket`` do (a ConnectionError, retried), not fail with an
    AttributeError."""
    queue.enqueue("t")
    connection = queue._pinned._connection
    connection._parser.on_disconnect()  # the first half of disconnect(), seen from a call
    assert connection._sock is not None
    assert queue.enqueue("t", {"after": "half"}).created


def test_a_connection_half_disconnected_during_the_call_is_not_written_to(
        queue: Queue, redis_client: redis.Redis, monkeypatch: pytest.MonkeyPatch) -> None:
    """The same state met after the stale check (another thread's disconnect() between the two):
    nothing is sent on that socket, which is dialled again; the job is written once."""
    queue.enqueue("t")
    connection = queue._pinned._connection
    monkeypatch.setattr(queue._pinned, "_readable", lambda _connection: False)
    connection._parser.on_disconnect()
    assert queue.enqueue("t", {"after": "half"}).created
    assert redis_client.llen(QS.keys.ready) == 2


def test_without_select_poll_the_calls_go_through_redis_py(
        redis_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Windows has no ``select.poll`` (nor has a gevent-patched ``select`` in some versions):
    redis-py checks for it and uses selectors; the pinned connection must not fail every call
    after the first with an AttributeError there."""
    import select

    import redis._parsers.hiredis
    monkeypatch.delattr(select, "poll", raising=False)
    monkeypatch.setattr(redis._parsers.hiredis, "_HAS_POLL", False)  # as redis-py found it
    q = Queue(connect(redis_url), settings=QS)
    try:
        assert q.enqueue("t").created
        assert q.enqueue("t", {"second": True}).created
        assert q.stats().ready == 2
    finally:
        q.close()


def test_a_connection_marked_for_reconnect_is_dialled_again_before_the_call(
        queue: Queue, redis_client: redis.Redis) -> None:
    """A MOVING maintenance notification marks the connection (redis-py's client then dials
    again before its next command); the pinned connection must not keep using it."""
    def client_id() -> int:
        connection.send_command("CLIENT", "ID")
        return int(connection.read_response())

    queue.enqueue("t")
    connection = queue._pinned._connection
    before = client_id()
    connection.mark_for_reconnect()
    assert queue.enqueue("t").created
    assert not connection.should_reconnect()
    assert client_id() != before
