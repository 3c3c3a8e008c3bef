"""Measuring a queue through the antre package, against a real Redis.

Aspects: depth in one script call (ready, due, processing, dead, oldest age); jobs in flight per
pod from the records of the jobs in flight and the worker registry; an unreachable Redis becomes
RedisReadError with the password redacted and a deadline; the eviction-policy check.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import json
import os
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import antre
import pytest
import redis
import redis.asyncio
from antre import redis_checks
from antre.protocol import scripts
from antre.protocol.claim import claim_op
from antre.protocol.extend_lease import extend_lease_op
from antre.settings import QueueSettings, WorkerSettings
from antre_operator import backlog, reply_cap
from hostile_redis import bulk, depth_reply, flooding_server, memory_mib, peak_memory_reset, stalling_server
from redis_servers import eventually, free_port, running_redis, script_calls


async def test_depth_in_one_round_trip(redis_url: str, redis_client: redis.Redis) -> None:
    antre.Queue(redis_client, "depth").enqueue_many([("noop", {})] * 7)
    reader = backlog.QueueReader(redis_url, queue="depth", prefix="antre", timeout_s=2)
    try:
        await reader.read()  # loads the script once
        before = script_calls(redis_client)
        reading = await reader.read()
        assert script_calls(redis_client) - before == 1
    finally:
        await reader.close()
    assert reading.numbers.ready == 7 and reading.numbers.backlog == 7
    assert reading.numbers.processing == 0 and reading.in_flight == 0
    assert reading.numbers.oldest_ready_age_s is not None and reading.numbers.oldest_ready_age_s >= 0


async def test_jobs_in_flight_by_pod(redis_url: str, redis_client: redis.Redis) -> None:
    """Counted from the jobs' records (who holds each lease now), not from the registry's
    counts, which are as old as each worker's last heartbeat."""
    settings = QueueSettings(name="reg")
    antre.Queue(redis_client, "reg").enqueue_many([("noop", {})] * 4)
    client = redis.asyncio.Redis.from_url(redis_url, decode_responses=True)
    try:
        # w1 claimed 2 jobs and w2 one since their last beats, which said 0, 5 and 0.
        for worker_id, pod, claims, stale in (("w1", "p-a", 2, 0), ("w2", "p-a", 1, 5),
                                              ("w3", "p-b", 0, 0)):
            entry = {"pod": pod, "host": pod, "pid": 1, "in_flight": stale,
                     "concurrency": 4, "started_at_ms": int(time.time() * 1000)}
            await scripts.run_async(client, extend_lease_op(
                settings, [], lease_ms=60_000, worker_id=worker_id,
                registry_entry_json=json.dumps(entry), registry_ttl_ms=60_000))
            if claims:
                await scripts.run_async(client, claim_op(
                    settings, WorkerSettings(), worker_id=worker_id, max_jobs=claims))
        # A job held by a worker without a live entry (gone) belongs to no pod.
        await scripts.run_async(client, claim_op(settings, WorkerSettings(), worker_id="gone",
                                                 max_jobs=1))
    finally:
        await client.aclose()
    reader = backlog.QueueReader(redis_url, queue="reg", prefix="antre", timeout_s=2)
    try:
        assert await reader.jobs_in_flight_by_pod() == {"p-a": 3, "p-b": 0}
    finally:
        await reader.close()


async def test_unreachable_redis_is_a_read_error_without_the_password() -> None:
    url = f"redis://:hunter2@127.0.0.1:{free_port()}/0"
    reader = backlog.QueueReader(url, queue="q", prefix="antre", timeout_s=1)
    started = time.monotonic()
    try:
        with pytest.raises(backlog.RedisReadError) as info:
            await reader.read()
    finally:
        await reader.close()
    assert "hunter2" not in str(info.value) and "***" in str(info.value)
    assert time.monotonic() - started < 3


@pytest.mark.parametrize("policy", ["volatile-lru", "allkeys-lfu"])
async def test_eviction_policy_warning(policy: str) -> None:
    with running_redis("--maxmemory-policy", policy) as server:
        reader = backlog.QueueReader(server.url, queue="q", prefix="antre", timeout_s=2)
        try:
            warning = await reader.eviction_warning()
        finally:
            await reader.close()
    assert warning is not None and repr(policy) in warning, "a known policy is named"


async def test_an_info_without_the_policy_is_unreadable_not_safe() -> None:
    """A proxy or a server that only speaks the protocol may answer INFO without
    maxmemory_policy. That is no evidence of noeviction: the reader reports it as it reports a
    refused INFO (RedisConfigured Unknown), never as a safe policy."""
    info = bulk(b"# Memory\r\nused_memory:1024\r\nmaxmemory:0\r\n")
    async with flooding_server(10, {b"INFO": info}) as (port, _):
        reader = backlog.QueueReader(f"redis://127.0.0.1:{port}/0", queue="q", prefix="antre",
                                     timeout_s=2)
        try:
            with pytest.raises(backlog.RedisRefused):
                await reader.eviction_warning()
        finally:
            await reader.close()


@pytest.mark.parametrize("url", [
    "redis://:pa/ss@127.0.0.1:{port}/0",
    "redis://127.0.0.1:{port}/0?password=pa/ss",
    "redis://u:pa/ss@127.0.0.1:{port}/0?password=pa/ss",
    "nosuchscheme://:pa/ss@127.0.0.1:{port}/0",
])
async def test_errors_never_carry_the_password(url: str) -> None:
    error = await failed_read(url.format(port=free_port()), timeout_s=1)
    assert "pa/ss" not in str(error)
    assert "ss@" not in str(error)


@contextlib.asynccontextmanager
async def fake_server(answer: bytes | None) -> AsyncIterator[int]:
    """A TCP server that sends ``answer`` to whatever it is told (None: says nothing)."""
    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.read(100)
        if answer is None:
            await reader.read()  # silent until the client gives up and hangs up
        else:
            writer.write(answer)
            await writer.drain()
        writer.close()

    server = await asyncio.start_server(handle, "127.0.0.1", 0)
    try:
        yield server.sockets[0].getsockname()[1]
    finally:
        server.close()


async def failed_read(url: str, *, timeout_s: float,
                      read: Callable[[backlog.QueueReader], Awaitable[Any]] = backlog.QueueReader.read,
                      ) -> backlog.RedisReadError:
    """What ``read`` (the depth by default) of a queue at ``url`` raises."""
    reader = backlog.QueueReader(url, queue="q", prefix="antre", timeout_s=timeout_s)
    try:
        with pytest.raises(backlog.RedisReadError) as info:
            await read(reader)
    finally:
        await reader.close()
    return info.value


async def read_error(port: int, timeout_s: float = 0.5) -> backlog.RedisReadError:
    """What reading a queue at 127.0.0.1:``port`` raises."""
    return await failed_read(f"redis://127.0.0.1:{port}/0", timeout_s=timeout_s)


@pytest.mark.parametrize("answer", [
    pytest.param(b"SSH-2.0-OpenSSH_9.6 banner-of-the-host\r\n", id="ssh-banner"),
    pytest.param(b"HTTP/1.1 400 Bad Request\r\nServer: banner-of-the-host\r\n\r\n", id="http"),
    pytest.param(b"-ERR banner-of-the-host\r\n", id="error-line"),
    pytest.param(b"+banner-of-the-host\r\n", id="status-line"),
    pytest.param(None, id="silent"),
    pytest.param(b"", id="closed-at-once"),
])
async def test_whatever_answers_the_status_message_is_the_same(answer: bytes | None) -> None:
    """A JobQueue author pointing the operator at hosts and ports learns nothing from the
    status but "no Redis answered" (or a bare Redis error code), never a server's bytes."""
    async with fake_server(answer) as port:
        error = await read_error(port)
    message = str(error)
    assert "banner-of-the-host" not in message
    if answer is not None and answer.startswith(b"-"):
        # An error reply is Redis's own syntax: a bare "refused", with a code only when it is
        # an upper-case word (NOPERM, OOM), never the rest of the line.
        assert message == f"redis://127.0.0.1:{port}/0: Redis refused the command", message
    else:
        assert message == f"redis://127.0.0.1:{port}/0: {backlog.NO_REDIS_MESSAGE}", message


async def test_a_closed_port_reads_like_a_foreign_server() -> None:
    port = free_port()
    error = await read_error(port)
    assert str(error) == f"redis://127.0.0.1:{port}/0: {backlog.NO_REDIS_MESSAGE}"
    assert "Error 111" in error.detail, error.detail  # the log has the cause


async def test_a_reply_larger_than_any_queue_needs_is_not_read() -> None:
    """One operator serves every JobQueue: a Redis a JobQueue names (its author's own server)
    must not be able to fill the operator's memory by answering the depth read with hundreds of
    megabytes. The read stops at the depth read's cap and fails like any answer that is not
    Redis's."""
    flood, hung_up = 200 * 1024 * 1024, asyncio.Event()
    async with flooding_server(flood, hung_up=hung_up) as (port, sent):
        error = await read_error(port, timeout_s=30)
        assert backlog.NO_REDIS_MESSAGE in str(error)
        assert f"costing more than {reply_cap.DEPTH_CAP} bytes" in error.detail
        # What the server got out before the connection was dropped: the cap, plus what the
        # kernel's socket buffers hold (a few MB on loopback), far from the whole reply.
        await eventually(hung_up.is_set, timeout_s=5, message="the server to see the client go")
        assert sum(sent) < reply_cap.DEPTH_CAP + 24 * 1024 * 1024 < flood


async def test_a_reply_of_the_wrong_shape_reads_as_no_redis() -> None:
    """A server that passes the handshake and answers the depth script with a string: the
    same words as any other server that is not Redis, not a traceback of the parser."""
    async with flooding_server(10) as (port, _):
        error = await read_error(port)
    assert backlog.NO_REDIS_MESSAGE in str(error)


async def test_a_thousand_replies_share_the_cap_of_one_read() -> None:
    """The pods of the jobs in flight are found with one pipeline of up to 1,000 HGETs: each
    reply under the cap, ten of them over it. The replies of one read share it."""
    ids = b"*10\r\n" + b"".join(b"$2\r\nj%d\r\n" % i for i in range(10))
    no_workers = b"*3\r\n:1\r\n:0\r\n:-2\r\n"  # workers.lua: the registry is empty
    each = reply_cap.HOLDERS_CAP // 4 // reply_cap.BYTE_COST  # a quarter of the cap each
    async with flooding_server(each, {b"EVALSHA": no_workers, b"ZRANGE": ids}) as (port, _):
        error = await failed_read(f"redis://127.0.0.1:{port}/0", timeout_s=30,
                                  read=backlog.QueueReader.jobs_in_flight_by_pod)
    assert f"costing more than {reply_cap.HOLDERS_CAP} bytes" in error.detail, error.detail


async def test_a_hostile_eviction_policy_is_not_quoted() -> None:
    """A server of the JobQueue author's own answers ``INFO memory`` with a policy as long as
    the reply's cap allows: the warning names no such text and stays short, so the status patch
    that carries it is far below what the API server accepts."""
    policy = b"A" * (reply_cap.INFO_CAP // reply_cap.BYTE_COST - 2048)
    info = b"# Memory\r\nmaxmemory_policy:" + policy + b"\r\n"
    answers = {b"INFO": bulk(info)}
    async with flooding_server(10, answers) as (port, _):
        reader = backlog.QueueReader(f"redis://127.0.0.1:{port}/0", queue="q", prefix="antre",
                                     timeout_s=30)
        try:
            warning = await reader.eviction_warning()
        finally:
            await reader.close()
    assert warning is not None and "AAAA" not in warning and len(warning) < 400, warning[:400]
    assert "not a policy Redis knows" in warning


async def test_a_hostile_info_reply_does_not_hold_the_event_loop() -> None:
    """The eviction check runs ``INFO memory`` for every new reader (every JobQueue at once
    when the operator starts) and every 300 s. redis-py parsed the reply line by line in
    Python, in the event loop every JobQueue, kopf's watches and the liveness endpoint share: an
    8 MiB reply of short lines held it 0.5-0.8 s, and 10 JobQueues of one author held it for
    5-11 s at once. The reply now stops at its 64 KiB cap, and the policy's line is found with
    one search of the reply as it came."""
    lines = b"".join(b"k%d:%d\r\n" % (i, i) for i in range(900_000))
    info = lines[:8 * 1024 * 1024 - 4096]
    info = b"# Memory\r\n" + info[:info.rfind(b"\r\n") + 2]
    jobqueues = 10
    async with stalling_server(10, info=info) as (port, _):
        readers = [backlog.QueueReader(f"redis://127.0.0.1:{port}/0", queue=f"q{i}",
                                       prefix="antre", timeout_s=30)
                   for i in range(jobqueues)]
        worst, stop = 0.0, asyncio.Event()

        async def tick() -> None:  # stands for every other JobQueue's loop, kopf, /healthz
            nonlocal worst
            while not stop.is_set():
                started = time.perf_counter()
                await asyncio.sleep(0.01)
                worst = max(worst, time.perf_counter() - started - 0.01)

        ticker = asyncio.create_task(tick())
        try:
            results = await asyncio.gather(*(reader.eviction_warning() for reader in readers),
                                           return_exceptions=True)
        finally:
            stop.set()
            await ticker
            for reader in readers:
                await reader.close()
    print(f"{jobqueues} hostile INFO replies: the loop stood still {worst:.3f} s at most")
    assert all(isinstance(result, backlog.RedisReadError) for result in results), results
    assert worst < 0.25, worst


@pytest.mark.parametrize(("info", "policy"), [
    ("# Memory\r\nused_memory:1\r\nmaxmemory_policy:allkeys-lru\r\nx:1\r\n", "allkeys-lru"),
    ("maxmemory_policy:noeviction", "noeviction"),
    ("a:1\nmaxmemory_policy: volatile-lru \n", "volatile-lru"),
    ({"maxmemory_policy": "noeviction"}, "noeviction"),
    ("# Memory\r\nnot_maxmemory_policy:noeviction\r\n", None),
    ("", None),
    ({"node-1:7000": "a:1\r\n"}, None),
    # Replies per node: none of them is known to be the queue's node's.
    ({"node-1:7000": "a:1\r\n", "node-2:7001": "maxmemory_policy:noeviction\r\n"}, None),
])
def test_the_policy_is_found_in_info_as_the_server_sent_it(info: Any, policy: str | None) -> None:
    if policy is None:
        with pytest.raises(redis_checks.PolicyNotReported):
            backlog.policy_in_info(info)
    else:
        assert backlog.policy_in_info(info) == policy


def fill_the_largest_queue(client: redis.Redis, queue: str) -> None:
    """The largest registry and jobs in flight the operator reads of a queue: 1,000 workers
    whose pod names take the 63 characters a pod's host name has, and 1,000 jobs in flight
    whose ids take the 128 bytes a job id may, each held by one of those workers (1,001 would
    be read as the registry's counts, without their holders)."""
    settings = QueueSettings(name=queue)
    now_ms = int(time.time() * 1000)
    workers = []
    for n in range(1000):
        pod = f"{'j' * 42}-worker-{'a' * 7}-{n:05d}"
        workers.append(f"{pod}-1234567-abcdef")
        entry = {"worker_id": workers[-1], "pod": pod, "host": pod, "pid": 1234567,
                 "queue": queue, "in_flight": 1000, "concurrency": 1000,
                 "started_at_ms": now_ms, "stuck_threads": 0, "kept_locks": []}
        scripts.run(client, extend_lease_op(
            settings, [], lease_ms=600_000, worker_id=workers[-1], registry_ttl_ms=600_000,
            registry_entry_json=json.dumps(entry, separators=(",", ":"))))
    pipe = client.pipeline(transaction=False)
    for n, worker in enumerate(workers):
        job_id = f"{n:05d}".ljust(128, "x")
        pipe.zadd(settings.keys.processing, {job_id: now_ms + 600_000})
        pipe.hset(settings.keys.job(job_id), "worker", worker)
    for counter in ("enqueued", "done", "dead", "retried", "cancelled", "duplicate",
                    "lock_deferred", "lease_expired", "purged", "replayed"):
        pipe.hset(settings.keys.stats, counter, 2**53 - 1)
    pipe.execute()
    assert len(queue) == 128 and all(len(worker) <= 80 for worker in workers)


async def test_what_redis_answers_costs_a_fraction_of_each_cap(
        redis_url: str, redis_client: redis.Redis, reply_costs: dict[reply_cap.Read, int],
) -> None:
    """The caps leave room: what a Redis running antre answers for the largest queue the
    operator reads costs at most half of each cap (the numbers reply_cap's docstring gives)."""
    queue = "q" * 128
    fill_the_largest_queue(redis_client, queue)
    costs = reply_costs
    reader = backlog.QueueReader(redis_url, queue=queue, prefix="antre", timeout_s=5)
    try:
        await reader.read()  # a new connection: its handshake, and the script's load
        await reader.read()
        assert await reader.eviction_warning() is None
        by_pod = await reader.jobs_in_flight_by_pod()
    finally:
        await reader.close()
    assert len(by_pod) == 1000 and set(by_pod.values()) == {1}
    reads = [(read.cap, cost) for read, cost in costs.items()]
    print("costs (cap, cost):", reads)
    assert [cap for cap, _ in reads] == [
        reply_cap.DEPTH_CAP, reply_cap.DEPTH_CAP, reply_cap.INFO_CAP, reply_cap.REGISTRY_CAP,
        reply_cap.IN_FLIGHT_IDS_CAP, reply_cap.HOLDERS_CAP]
    assert all(cost <= cap / 2 for cap, cost in reads), reads
    assert sum(cost for _, cost in reads[3:]) <= reply_cap.IN_FLIGHT_CAP / 2


#: Replies of the shapes that cost hiredis and redis-py the most memory per byte received
#: (nested arrays hiredis reserves room for, empty arrays and sets, maps of one, a string of
#: 4-byte characters; error lines, each an exception, a redirection's parsed, an error's text
#: split into words), 64 KiB a chunk, read as the operator's connections read them: by redis-py's
#: own parser (the cluster nodes', which knows the redirections in every redis-py release).
_COSTLIEST = """
import gc, sys
import redis.asyncio
from antre_operator import reply_cap

def memory(peak=False):
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) * 1024 for line in f
                    if line.startswith("VmHWM:" if peak else "VmRSS:"))

n = 200_000
reply = {"nested": b"*16000\\r\\n" * 1000,
         "empty-arrays": b"*%d\\r\\n" % n + b"*0\\r\\n" * n,
         "empty-sets": b"*%d\\r\\n" % n + b"~0\\r\\n" * n,
         "maps-of-one": b"*%d\\r\\n" % n + b"%1\\r\\n:1\\r\\n:1\\r\\n" * n,
         "wide-text": b"$%d\\r\\n" % (8 * n) + "\\U0001F600".encode() * 2 * n + b"\\r\\n",
         "errors": b"*%d\\r\\n" % n + b"-E\\r\\n" * n,
         "moved": b"*%d\\r\\n" % n + b"-MOVED 1 a:1\\r\\n" * n,
         "ask": b"*%d\\r\\n" % n + b"-ASK 1 a:1\\r\\n" * n,
         "error-words": b"-ERR " + b"ab " * 4 * n + b"\\r\\n"}[sys.argv[1]]
chunks = [reply[i:i + 65536] for i in range(0, len(reply), 65536)]
# The parser's reader as redis-py makes it on connecting (decode_responses, as antre's clients).
connection = redis.asyncio.Connection(decode_responses=True,
                                      parser_class=reply_cap.CappedClusterParser)
connection._parser.on_connect(connection)
reader, tally, cost = connection._parser._reader, reply_cap.Tally(), 0
gc.collect()
with open("/proc/self/clear_refs", "w") as f:
    f.write("5")  # the peak from here
before = memory()
for chunk in chunks:
    cost += tally.cost(chunk)
    reader.feed(chunk)
    reader.gets()
print(memory(peak=True) - before, cost)
"""


@pytest.mark.parametrize("shape", ["nested", "empty-arrays", "empty-sets", "maps-of-one",
                                   "wide-text", "errors", "moved", "ask", "error-words"])
def test_what_a_reply_costs_is_never_below_the_memory_hiredis_takes(shape: str) -> None:
    """8 KB of nested array headers take 69 MiB: the cap is on this estimate, not on bytes.
    Error lines cost redis-py 3 to 5 times what they were charged as lines (it makes each an
    exception), and empty sets hiredis 2.2.1 twice what empty arrays cost."""
    run = subprocess.run([sys.executable, "-c", _COSTLIEST, shape], capture_output=True,
                         text=True, check=True, timeout=60, env={**os.environ})
    taken, cost = map(int, run.stdout.split())
    print(f"{shape}: {taken / 2**20:.1f} MiB taken, {cost / 2**20:.1f} MiB charged")
    assert 1024 * 1024 < taken <= cost, (taken, cost)


@pytest.mark.parametrize("reply", [b"*3\r\n*16000\r\n", b"*2\r\n-MOVED 1 a:1\r\n-E\r\n"])
def test_what_a_reply_costs_is_the_same_however_it_is_cut(reply: bytes) -> None:
    """A header or an error line split between chunks is counted once."""
    whole = reply_cap.cost(reply)
    for at in range(1, len(reply)):
        tally = reply_cap.Tally()
        assert tally.cost(reply[:at]) + tally.cost(reply[at:]) == whole, at
        tally = reply_cap.Tally()
        assert sum(tally.cost(reply[i:i + 1]) for i in range(len(reply))) >= whole
    assert reply_cap.cost(b"*3\r\n*16000\r\n") == 2 * 12 + 2 * 96 + 8 * 16003


def test_an_error_line_costs_its_text_however_many_chunks_it_spans() -> None:
    line = b"-ERR " + b"ab " * 100_000 + b"\r\n"
    tally = reply_cap.Tally()
    spread = sum(tally.cost(line[i:i + 1000]) for i in range(0, len(line), 1000))
    assert spread >= reply_cap.ERROR_BYTE_COST * len(line)


def test_the_reads_that_started_first_make_way() -> None:
    held = [("a", 10), ("b", 10), ("c", 0), ("d", 10)]  # in the order they started
    assert reply_cap.to_fail(held, "c", 5, limit=40) == []
    assert reply_cap.to_fail(held, "c", 15, limit=40) == ["a"]
    assert reply_cap.to_fail(held, "c", 25, limit=40) == ["a", "b"]
    # Only reads started before it make way: d's 10 stay, so c cannot take 31.
    assert reply_cap.to_fail(held, "c", 31, limit=40) is None
    assert reply_cap.to_fail(held, "a", 11, limit=40) is None


async def test_stalled_hostile_reads_share_a_bounded_budget_and_a_large_read_still_succeeds(
        redis_url: str, redis_client: redis.Redis) -> None:
    """One operator serves every JobQueue. 30 JobQueues of one author whose Redis answers the
    depth read with just under 8 MiB (the per-read cap there was) and never finishes held
    ~11 MiB each, 322 MiB in all, beyond the chart's 256 MiB limit; 30 more answer the
    registry read just under its cap. Now the depth reads fail at their cap, the registry reads
    hold at most the shared budget together, and another JobQueue's registry of 1,000 workers
    is read meanwhile: the stalled reads, older, make way for it."""
    queue = "q" * 128
    fill_the_largest_queue(redis_client, queue)
    victim = backlog.QueueReader(redis_url, queue=queue, prefix="antre", timeout_s=5)
    await victim.read()  # connected, as a JobQueue polled every few seconds is
    jobqueues = 30
    old_cap = 8 * 1024 * 1024
    async with stalling_server(old_cap - 64 * 1024) as (depth_port, depth_done), \
            stalling_server(reply_cap.REGISTRY_CAP // reply_cap.BYTE_COST - 64 * 1024) as (
                registry_port, registry_done):
        hostile = [backlog.QueueReader(f"redis://127.0.0.1:{port}/0", queue=f"h{i}",
                                       prefix="antre", timeout_s=30)
                   for port in (depth_port, registry_port) for i in range(jobqueues)]
        gc.collect()
        peak_memory_reset()
        before = memory_mib()
        reads = [asyncio.create_task(reader.read()) for reader in hostile[:jobqueues]]
        reads += [asyncio.create_task(reader.jobs_in_flight_by_pod())
                  for reader in hostile[jobqueues:]]
        try:
            # Each server has sent all it will, or seen its client give up.
            await eventually(lambda: len(depth_done) == len(registry_done) == jobqueues,
                             timeout_s=60, message="the hostile servers to have sent it all")
            by_pod = await victim.jobs_in_flight_by_pod()
            grown = memory_mib(peak=True) - before
        finally:
            for read in reads:
                read.cancel()
            results = await asyncio.gather(*reads, return_exceptions=True)
            for reader in [*hostile, victim]:
                await reader.close()
    print(f"{2 * jobqueues} hostile reads at once: memory grew {grown:.0f} MiB at most")
    # The bound docs/security.md gives: the shared budget, and 0.5 MiB per hostile JobQueue
    # (its 64 KiB, what asyncio buffers ahead of the parser); 16 MiB more for the victim's read
    # (2.5 MiB), the servers' side of the connections and the allocator.
    assert grown < reply_cap.SHARED_BYTES / 2**20 + 0.5 * 2 * jobqueues + 16, grown
    assert len(by_pod) == 1000 and set(by_pod.values()) == {1}
    assert all(isinstance(result, backlog.RedisReadError | asyncio.CancelledError)
               for result in results), results
    assert all(isinstance(result, backlog.RedisReadError) for result in results[:jobqueues])


HUGE = b"9" * 400


@pytest.mark.parametrize("reply", [
    pytest.param(depth_reply(oldest_age_ms=HUGE), id="oldest-age"),
    pytest.param(depth_reply(ready=HUGE), id="ready-count"),
])
async def test_a_huge_number_in_the_depth_reply_reads_as_no_redis(reply: bytes) -> None:
    """A 400-digit count in an otherwise well-formed reply: "no Redis answered", like any reply
    of a shape no Redis gives, not an OverflowError out of the reader (or out of the scaling
    maths the count would reach)."""
    async with flooding_server(10, {b"EVALSHA": reply}) as (port, _):
        error = await read_error(port, timeout_s=5)
    assert str(error) == f"redis://127.0.0.1:{port}/0: {backlog.NO_REDIS_MESSAGE}"
    assert "out of range" in error.detail and "999" not in error.detail, error.detail


@pytest.mark.parametrize("registry", [
    pytest.param(b"*3\r\n" + bulk(HUGE) + b":0\r\n:-2\r\n", id="server-time"),
    pytest.param(b"*7\r\n:1\r\n:0\r\n:-2\r\n$1\r\nw\r\n$3\r\ninf\r\n"
                 + bulk(b'{"pod": "p", "in_flight": 1' + b"0" * 400 + b"}") + b":1\r\n",
                 id="worker-entry"),
])
async def test_a_huge_number_in_the_worker_registry_fails_no_read(registry: bytes) -> None:
    """In the registry's own numbers it fails the read like the depth's; in one worker's
    entry it makes that entry unreadable (as a bad entry always did), not the read."""
    async with flooding_server(10, {b"EVALSHA": registry, b"ZRANGE": b"*0\r\n"}) as (port, _):
        reader = backlog.QueueReader(f"redis://127.0.0.1:{port}/0", queue="q", prefix="antre",
                                     timeout_s=5)
        try:
            if registry.startswith(b"*3"):
                with pytest.raises(backlog.RedisReadError, match="no Redis answered"):
                    await reader.jobs_in_flight_by_pod()
            else:
                assert await reader.jobs_in_flight_by_pod() == {}
        finally:
            await reader.close()
