"""The asyncio clients pack commands with hiredis: the same bytes and the same refusals as
redis-py's own Python packer, on every kind of connection antre opens."""

from __future__ import annotations

import enum
from typing import Any

import pytest
import redis
import redis.asyncio
from antre import AsyncQueue, command_packing, connection
from antre.protocol import scripts
from antre.protocol.claim import claim_op
from antre.settings import QueueSettings, WorkerSettings

ARGUMENTS = [
    ("SET", "clé-ünïcode", "värde ✓"),
    ("SET", "k", b"\x00\xff\r\n binary"),
    ("SET", "k", memoryview(b"view")),
    ("ZADD", "z", 1.5, "a", 0.1, "b", 1e20, "c", -0.0, "d", float("inf"), "e"),
    ("INCRBY", "n", 12345678901234567890),
    ("CONFIG GET", "maxmemory-policy"),
    (b"CLIENT ID",),
    scripts.evalsha_command(claim_op(QueueSettings(name="q"), WorkerSettings(),
                                     worker_id="w-1", max_jobs=5, claim_id="0123abcd")),
]

class Attempts(enum.IntEnum):
    THREE = 3


#: Arguments hiredis does not take, which redis-py's own packer sends or refuses.
HANDED_ON = [("SET", "k", Attempts.THREE)]
REFUSED = [("SET", "k", True), ("SET", "k", None), ("SET", "k", "lone \udc80 surrogate")]


def python_packed(*args: Any) -> bytes:
    return b"".join(redis.asyncio.Connection().pack_command(*args))


def test_asyncio_clients_pack_with_hiredis_the_same_bytes(redis_url: str) -> None:
    client = connection.connect_async(redis_url)
    packer = client.connection_pool.connection_class()
    assert type(packer).pack_command is not redis.asyncio.Connection.pack_command
    for args in ARGUMENTS:
        assert b"".join(packer.pack_command(*args)) == python_packed(*args), args
    commands = [("CLIENT", "ID"), ("TIME",), ARGUMENTS[-1]]
    assert (b"".join(packer.pack_commands(commands))
            == b"".join(redis.asyncio.Connection().pack_commands(commands)))
    for args in HANDED_ON:
        assert b"".join(packer.pack_command(*args)) == python_packed(*args), args
    for args in REFUSED:
        with pytest.raises(Exception) as ours:
            packer.pack_command(*args)
        with pytest.raises(Exception) as theirs:
            python_packed(*args)
        assert type(ours.value) is type(theirs.value), args


@pytest.mark.parametrize("url", ["redis://127.0.0.1:1/0", "rediss://127.0.0.1:1/0",
                                 "unix:///run/antre-none.sock"])
def test_every_standalone_connection_kind_is_switched(url: str) -> None:
    pool = connection.connect_async(url).connection_pool
    original = redis.asyncio.ConnectionPool.from_url(url).connection_class
    assert pool.connection_class is not original and issubclass(pool.connection_class, original)


@pytest.mark.parametrize("url", ["redis+sentinel://127.0.0.1:1/mymaster/0",
                                 "rediss+sentinel://127.0.0.1:1/mymaster/0"])
def test_sentinel_clients_are_switched(url: str) -> None:
    standalone = connection.connect_async("redis://127.0.0.1:1/0").connection_pool
    connection_class = connection.connect_async(url).connection_pool.connection_class
    assert connection_class.pack_command is standalone.connection_class.pack_command


def test_switching_a_client_twice_changes_nothing() -> None:
    client = connection.connect_async("redis://127.0.0.1:1/0")
    switched = client.connection_pool.connection_class
    assert command_packing.packed_by_hiredis(client).connection_pool.connection_class is switched


def test_a_client_of_another_encoding_keeps_redis_pys_packer() -> None:
    pool = connection.connect_async("redis://127.0.0.1:1/0", encoding="latin-1").connection_pool
    assert pool.connection_class is redis.asyncio.Connection


async def test_jobs_round_trip_through_the_hiredis_packer(redis_url: str) -> None:
    queue = AsyncQueue(connection.connect_async(redis_url), settings=QueueSettings(name="pack"))
    try:
        payload = {"text": "ünïcode ✓ \u2028", "n": 12345678901234567890, "x": 0.1}
        job_id = (await queue.enqueue("t", payload)).job_id
        assert (await queue.get(job_id)).payload == payload
    finally:
        await queue.close()
