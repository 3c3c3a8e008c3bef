"""Measuring a queue on a Redis Cluster or behind Sentinels, with every reply under the caps of
``antre_operator.reply_cap``: a cluster's nodes (their topology too) and the Sentinels, hostile
or real.

Aspects: a hostile cluster node answering ``CLUSTER SLOTS``, ``COMMAND`` or the depth script with
array headers that make hiredis reserve tens of megabytes, or with a few bytes that make
redis-py store a slot range of millions, list millions of key positions or slots times nodes,
or keep thousands of commands, reads as "no Redis" within a bounded memory while another
JobQueue is read; so does a hostile Sentinel; a real three-node cluster and a real Sentinel
group are read through the caps, their replies costing at most half of each, and what a
cluster JobQueue keeps at rest, real or hostile, is bounded. The eviction check asks the node
holding the queue's slot alone: on a real cluster it warns for the queues of the evicting node
and no other, and a hostile topology naming a hundred nodes gets one INFO and one connection for
it.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
from collections.abc import Awaitable, Callable
from typing import Any

import antre
import pytest
import redis.utils
from antre import connection
from antre.keys import QueueKeys
from antre_operator import backlog, capped_redis, reply_cap
from hostile_redis import NESTED, bulk, depth_reply, flooding_server, memory_mib, peak_memory_reset
from redis.crc import key_slot
from redis_clusters import redis_cluster
from redis_sentinels import SERVICE, sentinel_group

#: Enough for a hostile read to reach its cap or stall in the code before the caps.
TIMEOUT_S = 3.0
#: What a failed read may leave behind, the other JobQueue's read and the allocator included:
#: before the caps, one hostile JobQueue took 69 MiB (NESTED) to 110 MiB (a million key positions).
GROWTH_MIB = 16.0


def slots_reply(port: int, *, last_slot: int = 16383) -> bytes:
    """CLUSTER SLOTS: the node at 127.0.0.1:``port`` serves slots 0 to ``last_slot``."""
    return ranges_reply([(0, last_slot, port)])


def replicated_slots_reply(port: int, replicas: int) -> bytes:
    """CLUSTER SLOTS: the node at 127.0.0.1:``port`` serves every slot, with ``replicas``
    replicas at other ports (none of them listening)."""
    nodes = [port, *range(20000, 20000 + replicas)]
    return b"*1\r\n*%d\r\n:0\r\n:16383\r\n" % (2 + len(nodes)) + b"".join(
        b"*2\r\n" + bulk(b"127.0.0.1") + b":%d\r\n" % node for node in nodes)


def ranges_reply(ranges: list[tuple[int, int, int]]) -> bytes:
    """CLUSTER SLOTS: each (first slot, last slot, port) served by the node at 127.0.0.1:port."""
    return b"*%d\r\n" % len(ranges) + b"".join(
        b"*3\r\n:%d\r\n:%d\r\n*3\r\n" % (first, last) + bulk(b"127.0.0.1") + b":%d\r\n" % port
        + bulk(b"%040x" % port) for first, last, port in ranges)


def command_reply(last_key: int) -> bytes:
    """COMMAND, listing ZRANGE alone, its keys from argument 1 to ``last_key``."""
    return b"*1\r\n*6\r\n" + bulk(b"zrange") + b":-4\r\n*1\r\n+readonly\r\n:1\r\n:%d\r\n:1\r\n" % last_key


def many_commands_reply(commands: int, *, flags: int = 0) -> bytes:
    """COMMAND, listing ``commands`` keyless commands, each with ``flags`` flags, all named
    apart (as strings of one character are not: Python shares those)."""
    return b"*%d\r\n" % commands + b"".join(
        b"*6\r\n" + bulk(b"c%07d" % n) + b":-1\r\n*%d\r\n" % flags
        + b"".join(b"+f%d\r\n" % flag for flag in range(n * flags, (n + 1) * flags))
        + b":0\r\n:0\r\n:0\r\n" for n in range(commands))


def cluster_answers(port: int, hostile: str) -> dict[bytes, bytes]:
    """What the hostile node answers: as a one-node cluster would, but for ``hostile`` (if it
    names a way)."""
    answers = {
        b"INFO": bulk(b"cluster_enabled:1\r\n"),  # redis-py 5 asks before CLUSTER SLOTS
        b"CLUSTER": slots_reply(port), b"COMMAND": command_reply(1),
        b"EVALSHA": depth_reply(), b"ZRANGE": b"*0\r\n"}
    if hostile == "slots":
        answers[b"CLUSTER"] = NESTED
    elif hostile == "slot-range":
        answers[b"CLUSTER"] = slots_reply(port, last_slot=3_000_000)
    elif hostile == "replicas":
        answers[b"CLUSTER"] = replicated_slots_reply(port, 999)
    elif hostile == "command":
        answers[b"COMMAND"] = NESTED
    elif hostile == "commands":
        answers[b"COMMAND"] = many_commands_reply(4000)
    elif hostile == "command-flags":
        answers[b"COMMAND"] = many_commands_reply(1, flags=20000)
    elif hostile == "key-positions":
        answers[b"COMMAND"] = command_reply(1_000_000)
        answers[b"EVALSHA"] = b"*3\r\n:1\r\n:0\r\n:-2\r\n"  # the registry read: no workers
    elif hostile == "depth-script":
        answers[b"EVALSHA"] = NESTED
    return answers


async def read_beside_another_jobqueue(hostile_url: str, healthy_url: str, *,
                                       read: Callable[[backlog.QueueReader], Awaitable[Any]],
                                       jobqueues: int = 3) -> tuple[list[Any], float]:
    """``read`` of ``jobqueues`` JobQueues at ``hostile_url`` and, meanwhile, the depth of one at
    ``healthy_url``: what each hostile read gave, and how far the peak memory grew."""
    healthy = backlog.QueueReader(healthy_url, queue="healthy", prefix="antre", timeout_s=5)
    await healthy.read()  # connected, as a JobQueue polled every few seconds is
    hostile = [backlog.QueueReader(hostile_url, queue=f"h{i}", prefix="antre",
                                   timeout_s=TIMEOUT_S) for i in range(jobqueues)]
    gc.collect()
    peak_memory_reset()
    before = memory_mib()
    try:
        *results, reading = await asyncio.gather(*map(read, hostile), healthy.read(),
                                                 return_exceptions=True)
        grown = memory_mib(peak=True) - before
    finally:
        for reader in [*hostile, healthy]:
            await reader.close()
    assert isinstance(reading, backlog.Reading), reading
    return results, grown


@pytest.mark.parametrize(("hostile", "cause"), [
    ("slots", f"costing more than {reply_cap.TOPOLOGY_CAP} bytes"),
    ("slot-range", "CLUSTER SLOTS: a slot range: not what a Redis Cluster answers"),
    ("replicas", "CLUSTER SLOTS: more than 16 nodes per slot: not what a Redis Cluster answers"),
    ("command", f"costing more than {reply_cap.TOPOLOGY_CAP} bytes"),
    ("key-positions", "COMMAND: key positions: not what a Redis Cluster answers"),
    ("commands", "COMMAND: more than 1024 commands or subcommands of one: not what a Redis"),
    ("command-flags", "COMMAND: a list of more than 32 items: not what a Redis Cluster"),
    ("depth-script", f"costing more than {reply_cap.DEPTH_CAP} bytes"),
])
async def test_a_hostile_cluster_node_reads_as_no_redis_in_bounded_memory(
        hostile: str, cause: str, redis_url: str) -> None:
    """Before the caps, a cluster's replies went uncapped: the array headers took 69 MiB per
    JobQueue, a slot range of 3 million slots 0.3 GiB, a million key positions 0.1 GiB. Within
    the caps and the 1,000 nodes, all slots listing 1,000 nodes took redis-py 5.0.x 135 MiB and
    5-7 s of the event loop (later releases keep the primary per slot and a list of replicas)."""
    read = (backlog.QueueReader.jobs_in_flight_by_pod if hostile == "key-positions"
            else backlog.QueueReader.read)
    answers: dict[bytes, bytes] = {}
    async with flooding_server(10, answers) as (port, _):
        answers.update(cluster_answers(port, hostile))  # its CLUSTER SLOTS names itself
        results, grown = await read_beside_another_jobqueue(
            f"redis+cluster://127.0.0.1:{port}", redis_url, read=read)
    print(f"{hostile}: memory grew {grown:.1f} MiB at most")
    for result in results:
        assert isinstance(result, backlog.RedisReadError), result
        assert backlog.NO_REDIS_MESSAGE in str(result), result
        assert cause in result.detail, result.detail
    assert grown < GROWTH_MIB, grown


async def test_a_hostile_sentinel_reads_as_no_redis_in_bounded_memory(redis_url: str) -> None:
    """redis-py asks a Sentinel for the primary (SENTINEL MASTERS) on each new connection;
    before the caps its reply went uncapped: 69 MiB per JobQueue."""
    async with flooding_server(10, {b"SENTINEL": NESTED}) as (port, _):
        results, grown = await read_beside_another_jobqueue(
            f"redis+sentinel://127.0.0.1:{port}/{SERVICE}/0", redis_url,
            read=backlog.QueueReader.read)
    print(f"hostile Sentinel: memory grew {grown:.1f} MiB at most")
    for result in results:
        assert isinstance(result, backlog.RedisReadError), result
        assert backlog.NO_REDIS_MESSAGE in str(result), result
        assert f"costing more than {reply_cap.SENTINEL_CAP} bytes" in result.detail, result.detail
    assert grown < GROWTH_MIB, grown


def sentinel_masters_reply(port: int, primaries: int) -> bytes:
    """SENTINEL MASTERS from a Sentinel watching ``primaries`` primaries, the first the service
    at 127.0.0.1:``port``, each entry as a Redis 7.0 Sentinel gives it (603 bytes, 82 lines): a
    map in RESP3, which redis-py speaks by default from 6 on, a flat array in RESP2."""
    resp3 = getattr(redis.utils, "DEFAULT_RESP_VERSION", 2) == 3
    def entry(name: str) -> bytes:
        fields = {"name": name, "ip": "127.0.0.1", "port": str(port),
                  "runid": "6b701d9ead32613a0f69f9634efdb9321eb55933", "flags": "master",
                  "link-pending-commands": "0", "link-refcount": "1", "last-ping-sent": "0",
                  "last-ok-ping-reply": "72", "last-ping-reply": "72",
                  "down-after-milliseconds": "1000", "info-refresh": "72",
                  "role-reported": "master", "role-reported-time": "76", "config-epoch": "0",
                  "num-slaves": "2", "num-other-sentinels": "2", "quorum": "2",
                  "failover-timeout": "2000", "parallel-syncs": "2"}
        header = b"%%%d\r\n" % len(fields) if resp3 else b"*%d\r\n" % (2 * len(fields))
        return header + b"".join(
            bulk(key.encode()) + bulk(value.encode()) for key, value in fields.items())
    names = [SERVICE, *(f"other{n}" for n in range(1, primaries))]
    return b"*%d\r\n" % primaries + b"".join(map(entry, names))


async def test_a_sentinel_watching_hundreds_of_primaries_is_read(redis_url: str) -> None:
    """Each primary a Sentinel watches costs 9 KiB of its SENTINEL MASTERS reply: under the
    2 MiB cap there was, a Sentinel watching more than about 230 failed every read."""
    reply = sentinel_masters_reply(int(redis_url.rsplit(":", 1)[1].split("/")[0]), 400)
    assert reply_cap.cost(reply) > 2 * 1024 * 1024
    async with flooding_server(10, {b"SENTINEL": reply}) as (port, _):
        reader = backlog.QueueReader(f"redis+sentinel://127.0.0.1:{port}/{SERVICE}/0",
                                     queue="q", prefix="antre", timeout_s=10)
        try:
            reading = await reader.read()
        except backlog.RedisReadError as exc:
            raise AssertionError(exc.detail) from exc
        finally:
            await reader.close()
    assert isinstance(reading, backlog.Reading), reading


async def read_all(url: str, costs: dict[reply_cap.Read, int], *, apart_cap: int) -> int:
    """The depth of queue "q" at ``url``, its jobs in flight (none) and eviction policy (none),
    each read's replies costing at most half its cap; one read at least has ``apart_cap``."""
    reader = backlog.QueueReader(url, queue="q", prefix="antre", timeout_s=10)
    try:
        reading = await reader.read()
        assert await reader.jobs_in_flight_by_pod() == {}
        assert await reader.eviction_warning() is None
    finally:
        await reader.close()
    most: dict[int, int] = {}
    for read, cost in costs.items():
        most[read.cap] = max(most.get(read.cap, 0), cost)
    print("the costliest read of each cap (cap: cost):", most)
    assert apart_cap in most and reply_cap.DEPTH_CAP in most, most
    assert all(cost <= cap / 2 for cap, cost in most.items()), most
    return reading.numbers.ready


async def test_a_real_cluster_is_read_through_the_caps(
        reply_costs: dict[reply_cap.Read, int]) -> None:
    """Its topology (CLUSTER SLOTS and COMMAND: 2.1 MiB from Redis 7.0) under a cap of its own,
    the rest under the reads' caps."""
    with redis_cluster() as cluster:
        with connection.connect(cluster.url) as client:
            antre.Queue(client, "q").enqueue_many([("noop", {})] * 5)
        assert await read_all(cluster.url, reply_costs, apart_cap=reply_cap.TOPOLOGY_CAP) == 5


async def test_a_real_sentinel_group_is_read_through_the_caps(
        reply_costs: dict[reply_cap.Read, int]) -> None:
    """The Sentinels' replies each under a cap of their own, the primary's under the reads'."""
    with sentinel_group() as group:
        with group.primary_client() as client:
            antre.Queue(client, "q").enqueue_many([("noop", {})] * 5)
        assert await read_all(group.url(), reply_costs, apart_cap=reply_cap.SENTINEL_CAP) == 5


async def held_at_rest(url: str, *, jobqueues: int = 4) -> float:
    """What each of ``jobqueues`` JobQueues at ``url`` keeps in memory once read (MiB): its
    client, connections and topology, which live as long as the JobQueue."""
    readers = [backlog.QueueReader(url, queue="q", prefix="antre", timeout_s=10)
               for _ in range(jobqueues)]
    gc.collect()
    before = memory_mib()
    try:
        for reader in readers:
            try:
                reading = await reader.read()
            except backlog.RedisReadError as exc:
                raise AssertionError(exc.detail) from exc
            assert isinstance(reading, backlog.Reading)
        gc.collect()
        return (memory_mib() - before) / jobqueues
    finally:
        for reader in readers:
            await reader.close()


def subcommands_reply(commands: int, subcommands: int) -> bytes:
    """COMMAND, listing ``commands`` keyless commands of ``subcommands`` subcommands each, all
    named apart."""
    entry = b":-1\r\n*0\r\n:0\r\n:0\r\n:0\r\n*0\r\n*0\r\n*0\r\n"
    return b"*%d\r\n" % commands + b"".join(
        b"*10\r\n" + bulk(b"c%07d" % n) + entry + b"*%d\r\n" % subcommands + b"".join(
            b"*10\r\n" + bulk(b"c%07d|s%07d" % (n, s)) + entry + b"*0\r\n"
            for s in range(subcommands))
        for n in range(commands))


def most_subcommands_within_the_cap() -> bytes:
    """The COMMAND reply of the most commands of the most subcommands that fit under the cap."""
    commands = 1
    while reply_cap.cost(subcommands_reply(commands + 1, capped_redis.MAX_SUBCOMMANDS)) \
            < reply_cap.TOPOLOGY_CAP:
        commands += 1
    return subcommands_reply(commands, capped_redis.MAX_SUBCOMMANDS)


async def test_what_a_cluster_jobqueue_keeps_at_rest_is_bounded() -> None:
    """redis-py keeps a cluster's topology as long as the client: a map of the 16,384 slots to
    their nodes and ``COMMAND``'s table. A hostile cluster keeps the most it can within the
    checks and the cap (each slot listed with 16 nodes, and 1,024 commands of 32 flags, or as
    many commands of 128 subcommands as the cap lets through); 8,000 commands kept 4-6 MiB per
    JobQueue before, and more now fail (the test above). The figures docs/security.md gives,
    with room for the allocator."""
    with redis_cluster() as cluster:
        honest = await held_at_rest(cluster.url)
    hostile = {}
    for shape, command in (
            ("subcommands", most_subcommands_within_the_cap()),
            ("flags", many_commands_reply(capped_redis.MAX_COMMANDS,
                                          flags=capped_redis.MAX_COMMAND_LIST))):
        answers: dict[bytes, bytes] = {}
        async with flooding_server(10, answers) as (port, _):
            answers.update(cluster_answers(port, "no way"))
            answers[b"CLUSTER"] = replicated_slots_reply(
                port, capped_redis.MAX_SLOT_NODES // capped_redis.CLUSTER_SLOTS - 1)
            answers[b"COMMAND"] = command
            assert reply_cap.cost(command) < reply_cap.TOPOLOGY_CAP
            hostile[shape] = await held_at_rest(f"redis+cluster://127.0.0.1:{port}")
    print(f"kept per JobQueue: {honest:.1f} MiB of a real cluster, {hostile} MiB of hostile ones")
    assert honest < 4, honest
    assert all(kept < 6 for kept in hostile.values()), hostile


async def test_the_eviction_check_reads_the_node_holding_the_queue() -> None:
    """A queue's keys share its hash tag, so one primary holds the queue and its
    maxmemory-policy alone decides. Before, INFO went to redis-py's default node (the first
    primary it knows), whose policy decided for every queue: the queues of the other nodes read
    as evicting when only it evicted, and as safe when their own node evicted."""
    with redis_cluster() as cluster:
        queue_on: dict[int, str] = {}  # a queue whose slot each node serves
        for n in range(1000):
            queue_on.setdefault(cluster.owner_port(QueueKeys(f"q{n}").ready), f"q{n}")
            if len(queue_on) == len(cluster.nodes):
                break
        wrong = []
        for node in cluster.nodes:
            with cluster.evicting(node.port):
                for port, queue in sorted(queue_on.items()):
                    reader = backlog.QueueReader(cluster.url, queue=queue, prefix="antre",
                                                 timeout_s=10)
                    try:
                        warned = await reader.eviction_warning() is not None
                    finally:
                        await reader.close()
                    if warned != (port == node.port):
                        wrong.append(f"allkeys-lru on node {node.port}: queue {queue} on node "
                                     f"{port} {'warned' if warned else 'did not warn'}")
    assert len(queue_on) == len(cluster.nodes), queue_on
    assert wrong == []


#: The nodes the hostile topology names (capped_redis.MAX_CLUSTER_NODES would pass too).
HOSTILE_NODES = 100


async def test_a_hostile_cluster_gets_one_eviction_check_connection() -> None:
    """A JobQueue author's topology may name up to 1,000 nodes, and a connection to each would
    hold up to 0.4 MiB of asyncio's buffer before its reply failed the cap. The check sends one
    INFO, to the node of the queue's slot; COMMAND, read with the topology, goes to redis-py's
    default node: two of the nodes named get a connection at most. (Before, the one INFO went
    to the default node: one connection, to a node that may not hold the queue.)"""
    assert HOSTILE_NODES <= capped_redis.MAX_CLUSTER_NODES
    accepted: list[int] = []
    heard: list[tuple[int, bytes]] = []
    async with contextlib.AsyncExitStack() as stack:
        ports = [(await stack.enter_async_context(flooding_server(
            1 << 20, {b"COMMAND": command_reply(1)}, accepted=accepted, heard=heard)))[0]
            for _ in range(HOSTILE_NODES)]
        size = -(-capped_redis.CLUSTER_SLOTS // HOSTILE_NODES)
        ranges = [(first, min(first + size, capped_redis.CLUSTER_SLOTS) - 1, port)
                  for first, port in zip(range(0, capped_redis.CLUSTER_SLOTS, size), ports,
                                         strict=True)]
        seed, _ = await stack.enter_async_context(flooding_server(10, {
            b"INFO": bulk(b"cluster_enabled:1\r\n"), b"CLUSTER": ranges_reply(ranges),
            b"COMMAND": command_reply(1)}))
        reader = backlog.QueueReader(f"redis+cluster://127.0.0.1:{seed}", queue="q",
                                     prefix="antre", timeout_s=TIMEOUT_S)
        gc.collect()
        peak_memory_reset()
        before = memory_mib()
        try:
            with pytest.raises(backlog.RedisReadError) as failed:
                await reader.eviction_warning()
            grown = memory_mib(peak=True) - before
        finally:
            await reader.close()
    owner = ports[key_slot(QueueKeys("q").ready.encode()) // size]
    asked = sorted(port for port, command in heard if command == b"INFO")
    print(f"{HOSTILE_NODES} nodes named: INFO sent to {len(asked)}, {len(accepted)} connections "
          f"to them; memory grew {grown:.1f} MiB at most")
    assert f"costing more than {reply_cap.INFO_CAP} bytes" in failed.value.detail, failed.value
    assert asked == [owner], asked
    assert len(accepted) <= 2 and owner in accepted, accepted
