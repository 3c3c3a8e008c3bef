"""Redis memory per job record, in each state a record is kept in: queued, finished (done, kept
for ``done_ttl_s``) and dead. It reports; it asserts nothing.

For each state ``--jobs`` no-op jobs (small payload) are brought there through the real scripts
(enqueue_many; claim and ack; claim and a permanent fail) and the ``used_memory`` delta of INFO
memory is divided by the number of jobs; ``MEMORY USAGE`` and ``OBJECT ENCODING`` of a sample
record say where it goes. The worker id is a Kubernetes-like one (pod name, pid, random), as
the default ``<hostname>-<pid>-<random>`` gives inside a pod. It also prints what packing a
finished record costs Redis on the ack (INFO commandstats): the same acks with ``done_ttl_s`` 0,
which keep no record, are the baseline; and the Redis time per job of the enqueue script
(``enqueue_many``, 200 jobs per call) and of the claim (which turns a queued job into its Hash).

    python bench/memory.py                  # 100,000 jobs per state, ~1 min
    python bench/memory.py --jobs 10000     # quick
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
from collections.abc import Callable

import redis

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import antre
from antre.protocol import ack, claim, extend_lease, fail, scripts

from bench import _harness as h
from bench import _results

WORKER_ID = "emails-worker-7d9f8b6c5d-x2x4z-1-a1b2c3"
BATCH = 1000
#: A short error (the exception's class and message), and one past the 64-byte listpack limit.
ERROR = "ValueError: boom"
LONG_ERROR = ("ConnectionError: Error 111 connecting to smtp.internal.example.com:587. "
              "Connection refused.")


def _used(r: redis.Redis) -> int:
    return int(r.info("memory")["used_memory"])


def _measure(r: redis.Redis, bring: Callable[[], None], jobs: int, *,
             serve: Callable[[], None] | None = None) -> float:
    """Bytes per job that ``bring`` adds, after ``serve`` (a worker registering) if given."""
    r.flushall()
    if serve is not None:
        serve()
    with contextlib.suppress(redis.ResponseError):
        r.memory_purge()
    before = _used(r)
    bring()
    return (_used(r) - before) / jobs


def _script_usec(r: redis.Redis) -> int:
    """Microseconds Redis has spent in script calls so far (INFO commandstats)."""
    stats = r.info("commandstats")
    return sum(int(stats.get(f"cmdstat_{name}", {}).get("usec", 0)) for name in ("evalsha", "eval"))


def _sample(r: redis.Redis, qs: antre.QueueSettings) -> str:
    key = next(r.scan_iter(match=qs.keys.job_prefix + "*", count=1000), None)
    if key is None:  # jobs not claimed yet are fields of one Hash, not keys
        queued = qs.keys.queued
        fields = r.hlen(queued)
        return (f"queued Hash: MEMORY USAGE {r.memory_usage(queued, samples=0) / fields:,.0f} B per "
                f"field, {r.object('encoding', queued)}")
    return f"MEMORY USAGE {r.memory_usage(key)} B, {r.object('encoding', key)}"


def floor(r: redis.Redis, jobs: int) -> list[list[str]]:
    """What Redis's building blocks cost per job, whatever the layout: the floor under a record
    (a job id as long as ours, a key as long as a job key of queue ``bench``)."""
    def job_id(i: int) -> str:
        return f"1a2301bdc47b4{i:014x}"

    def key(i: int) -> str:
        return "antre:{bench}:job:" + job_id(i)

    blocks: list[tuple[str, Callable[[redis.client.Pipeline, int], object]]] = [
        ("a Hash key with one small field", lambda p, i: p.hset(key(i), "t", "noop")),
        ("the same with a TTL (PEXPIRE)", lambda p, i: (p.hset(key(i), "t", "noop"),
                                                        p.pexpire(key(i), 86_400_000))),
        ("an id in a List", lambda p, i: p.lpush("antre:{bench}:queue", job_id(i))),
        ("an id in a ZSET", lambda p, i: p.zadd("antre:{bench}:dead_letters", {job_id(i): i})),
        ("a field of one shared Hash", lambda p, i: p.hset("antre:{bench}:jobs", job_id(i),
                                                          "noop|null|5|1796103462047")),
    ]
    rows = []
    for label, write in blocks:
        def bring(write: Callable[[redis.client.Pipeline, int], object] = write) -> None:
            pipe = r.pipeline(transaction=False)
            for i in range(jobs):
                write(pipe, i)
                if i % 5000 == 4999:
                    pipe.execute()
            pipe.execute()
        rows.append([label, f"{_measure(r, bring, jobs):,.0f}"])
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=100_000)
    parser.add_argument("--rate", type=float, default=100.0,
                        help="jobs/s for the cost of a day of finished records")
    parser.add_argument("--listpack-value", type=int, default=64,
                        help="the server's hash-max-listpack-value (Redis's default: 64)")
    args = parser.parse_args()
    server = h.start_redis("--hash-max-listpack-value", str(args.listpack_value))
    try:
        r = redis.Redis.from_url(server.url, decode_responses=True)
        qs = antre.QueueSettings(name="bench")
        ws = antre.WorkerSettings()
        queue = antre.Queue.from_url(server.url, settings=qs)

        #: Redis's time in the enqueue and claim scripts: [usec, jobs].
        spent_usec = {"enqueue": [0, 0], "claim": [0, 0]}

        def enqueue(max_attempts: int = 5) -> None:
            job = {"type": "noop", "payload": {"n": 1}, "max_attempts": max_attempts}
            for _ in range(0, args.jobs, BATCH):
                before = _script_usec(r)
                queue.enqueue_many([job] * BATCH)
                spent_usec["enqueue"][0] += _script_usec(r) - before
                spent_usec["enqueue"][1] += BATCH

        def claimed() -> list[tuple[str, int]]:
            before = _script_usec(r)
            result = scripts.run(r, claim.claim_op(qs, ws, worker_id=WORKER_ID, max_jobs=BATCH))
            spent_usec["claim"][0] += _script_usec(r) - before
            spent_usec["claim"][1] += len(result.jobs)
            return [(job.id, job.lease) for job in result.jobs]

        def serve() -> None:
            """The worker registers as its heartbeat does: producers then write queued jobs as
            fields (PROTOCOL.md "Versions"); with no worker registered, as Hashes."""
            scripts.run(r, extend_lease.extend_lease_op(
                qs, [], lease_ms=30_000, worker_id=WORKER_ID, registry_entry_json="{}",
                registry_ttl_ms=3_600_000))

        ack_usec: dict[float, list[int]] = {}

        def finish(settings: antre.QueueSettings = qs) -> None:
            enqueue()
            spent = ack_usec.setdefault(settings.done_ttl_s, [0, 0])
            while leases := claimed():
                for chunk in scripts.chunked(leases):  # as a worker acks: 200 per call at most
                    before = _script_usec(r)
                    scripts.run(r, ack.ack_op(settings, chunk, worker_id=WORKER_ID))
                    spent[0] += _script_usec(r) - before
                    spent[1] += len(chunk)

        def kill(error: str) -> Callable[[], None]:
            def bring() -> None:
                enqueue(max_attempts=1)
                while leases := claimed():
                    for lease in leases:
                        scripts.run(r, fail.fail_op(qs, lease, error=error, retry_delay_ms=None,
                                                    worker_id=WORKER_ID))
            return bring

        # The ack's cost of packing: the same acks with done_ttl_s 0 keep no record (a stub).
        serve()
        finish(antre.QueueSettings(name="bench", done_ttl_s=0))
        rows = []
        for state, bring, served in (
                ("queued, served by a worker of this version", enqueue, True),
                ("queued, no worker registered (a Hash each)", enqueue, False),
                ("finished (done, kept)", finish, True),
                (f"dead, {len(ERROR)}-character error", kill(ERROR), True),
                (f"dead, {len(LONG_ERROR)}-character error", kill(LONG_ERROR), True)):
            per_job = _measure(r, bring, args.jobs, serve=serve if served else None)
            rows.append([state, f"{per_job:,.0f}", _sample(r, qs)])
            if state.startswith("finished"):
                day = per_job * args.rate * 86_400
        queue.close()
        print(f"Redis {r.info('server')['redis_version']} (hash-max-listpack-value "
              f"{args.listpack_value}), {args.jobs:,} jobs per state, "
              f"{h.load_line()}\n")
        print(h.table(["state", "bytes/job (INFO used_memory)", "sample record"], rows))
        print(f"\nA day of finished records at {args.rate:,.0f} jobs/s (done_ttl_s one day): "
              f"{day / 2**30:,.2f} GiB")
        kept, stub = (ack_usec[ttl][0] / ack_usec[ttl][1] for ttl in (qs.done_ttl_s, 0))
        print(f"Redis time of an ack, per job: {kept:.1f} us packing the finished record, "
              f"{stub:.1f} us keeping none (done_ttl_s 0): {kept / stub:.2f}x")
        print("Redis time per job: " + ", ".join(
            f"{name} {usec / jobs:.1f} us" for name, (usec, jobs) in spent_usec.items())
            + f" (enqueue_many: {scripts.MAX_JOBS_PER_CALL} jobs per call; claims of"
              f" {scripts.MAX_JOBS_PER_CALL})")
        print("\nThe floor: what Redis's building blocks cost per job, whatever the layout\n")
        print(h.table(["building block", "bytes/job"], floor(r, args.jobs)))
    finally:
        server.stop()


if __name__ == "__main__":
    _results.run_and_keep(main, __file__)
