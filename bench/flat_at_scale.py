"""Flat at scale: how long single script calls hold Redis, and the enqueue and claim rates with a
million jobs queued against an empty queue. It reports; it asserts nothing.

Each step reports its script calls as Redis itself timed them (no network, no client): how many,
their mean (INFO commandstats) and the slowest (SLOWLOG, which logs calls over 1 ms). On a busy
machine the slowest call also counts time Redis waited for a core; the mean is the steadier
figure. The calls are made as the worker and the client make them: a worker at concurrency
10,000 claims until its slots are full (the client caps what one call takes), acks and renewals
go in the worker's batches, the reaper recovers 100,000 expired leases pass by pass, and dead
letters are replayed by id through ``Queue.replay``. The enqueue and claim rates are taken in
interleaved rounds on two queues of one server: one holding only the measured jobs, one holding
the million.

    python bench/flat_at_scale.py                   # 1,000,000 queued, ~3 min
    python bench/flat_at_scale.py --queued 200000   # quicker
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable
from pathlib import Path

import redis

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import antre
from antre import reaper
from antre.protocol import ack, claim, extend_lease, fail, scripts

from bench import _harness as h
from bench import _results

WORKER = "emails-worker-7d9f8b6c5d-x2x4z-1-a1b2c3"
#: Claims the leases the reaper recovers; never beats (see its use).
SHORT_WORKER = "emails-worker-7d9f8b6c5d-x2x4z-2-d4e5f6"
#: Free slots of a worker at the largest concurrency the settings allow.
LARGEST_CLAIM = 10_000
RATE_JOBS = 3_000


def slowest_script_call(r: redis.Redis, names: dict[str, str]) -> str:
    """The slowest script call in the SLOWLOG (calls over 1 ms are logged), as 'ms (script)'.
    Redis 7 logs the commands a script ran too: those are left out."""
    worst: tuple[float, str] = (0.0, "")
    for entry in r.slowlog_get(100_000):
        command = entry["command"]
        parts = (command.decode(errors="replace") if isinstance(command, bytes) else command).split()
        if len(parts) > 1 and parts[0].upper() in ("EVALSHA", "EVAL"):
            worst = max(worst, (entry["duration"] / 1000, names.get(parts[1], "first load")))
    return f"{worst[0]:.1f} ({worst[1]})" if worst[1] else "< 1"


def step(r: redis.Redis, names: dict[str, str], rows: list[list[str]], label: str,
         action: Callable[[], object]) -> None:
    """Runs ``action`` and reports its script calls as Redis timed them: how many, their mean
    (INFO commandstats, reset before the step) and the slowest (SLOWLOG)."""
    r.config_resetstat()
    r.slowlog_reset()
    start = time.perf_counter()
    action()
    took = time.perf_counter() - start
    stats = r.info("commandstats")
    calls = usec = 0
    for command in ("cmdstat_evalsha", "cmdstat_eval"):
        calls += int(stats.get(command, {}).get("calls", 0))
        usec += int(stats.get(command, {}).get("usec", 0))
    rows.append([label, f"{calls:,}", f"{usec / max(calls, 1) / 1000:.2f}",
                 slowest_script_call(r, names), f"{took:.1f} s"])
    print("  " + " | ".join(rows[-1]), flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--queued", type=int, default=1_000_000)
    parser.add_argument("--expired", type=int, default=100_000)
    parser.add_argument("--dead", type=int, default=20_000)
    parser.add_argument("--rounds", type=int, default=5, help="interleaved rounds of the rates")
    parser.add_argument("--per-call", type=int, default=scripts.MAX_JOBS_PER_CALL,
                        help="jobs per script call (MAX_JOBS_PER_CALL); 10000 shows one claim of "
                             "a worker's 10,000 free slots in one call, as before the cap")
    args = parser.parse_args()
    scripts.MAX_JOBS_PER_CALL = args.per_call  # type: ignore[misc]
    server = h.start_redis("--slowlog-log-slower-than", "1000", "--slowlog-max-len", "100000")
    r = redis.Redis.from_url(server.url, decode_responses=True)
    names = {scripts.load(name).sha: name for name in (
        "enqueue", "claim", "ack", "extend_lease", "fail", "reap", "replay", "purge")}
    full = antre.QueueSettings(name="full")  # holds the million
    small = antre.QueueSettings(name="small")  # holds only the jobs the rates enqueue
    ws = antre.WorkerSettings(concurrency=LARGEST_CLAIM)
    rows: list[list[str]] = []
    print(h.load_line(), "(before)")

    def claimed(qs: antre.QueueSettings, max_jobs: int,
                worker_settings: antre.WorkerSettings = ws,
                worker_id: str = WORKER) -> list[tuple[str, int]]:
        result = scripts.run(r, claim.claim_op(qs, worker_settings, worker_id=worker_id,
                                               max_jobs=max_jobs))
        if not result.jobs:  # the loops below would wait for ever
            raise h.BenchError(f"a claim of {qs.name} by {worker_id} leased nothing")
        return [(job.id, job.lease) for job in result.jobs]

    enqueue_rates = {name: h.Series() for name in ("warm-up", "small", "full")}
    claim_rates = {name: h.Series() for name in ("warm-up", "small", "full")}

    def rates(qs: antre.QueueSettings, name: str) -> None:
        queue = antre.Queue(r, settings=qs)
        start = time.perf_counter()
        for _ in range(RATE_JOBS):
            queue.enqueue("noop", {"n": 1})
        enqueue_rates[name].add(RATE_JOBS / (time.perf_counter() - start))
        start = time.perf_counter()
        for _ in range(RATE_JOBS // 16):  # a worker at concurrency 16: claim 16, ack them
            scripts.run(r, ack.ack_op(qs, claimed(qs, 16), worker_id=WORKER))
        claim_rates[name].add(RATE_JOBS // 16 * 16 / (time.perf_counter() - start))

    try:
        job = ("noop", {"n": 1})
        big = antre.Queue(r, settings=full)
        step(r, names, rows, f"enqueue_many of {args.queued:,} jobs",
             lambda: big.enqueue_many([job] * args.queued))
        rates(small, "warm-up")  # scripts loaded, connections open: not counted
        for round_number in range(args.rounds):
            # ABBA order, so a drift in the machine's load favours neither queue.
            pair = [(small, "small"), (full, "full")]
            for qs, name in pair if round_number % 2 == 0 else reversed(pair):
                rates(qs, name)

        held: list[tuple[str, int]] = []

        def fill_slots() -> None:  # as the claim loop does: claim again while slots are free
            while len(held) < LARGEST_CLAIM:
                held.extend(claimed(full, LARGEST_CLAIM - len(held)))
        step(r, names, rows, f"claims filling {LARGEST_CLAIM:,} free slots", fill_slots)
        step(r, names, rows, f"one heartbeat renewing {len(held):,} leases", lambda: [
            scripts.run(r, op) for op in extend_lease.extend_lease_ops(
                full, held, lease_ms=ws.lease_ms, worker_id=WORKER, registry_entry_json="{}",
                registry_ttl_ms=15_000)])
        step(r, names, rows, f"acks of {len(held):,} finished runs", lambda: [
            scripts.run(r, ack.ack_op(full, chunk, worker_id=WORKER))
            for chunk in scripts.chunked(held)])

        short = antre.WorkerSettings(visibility_timeout_s=1, concurrency=LARGEST_CLAIM)
        expiring: list[tuple[str, int]] = []
        while len(expiring) < args.expired:
            # A worker id that never beats: the claim gives nothing to a worker whose last
            # heartbeat is older than its lease (a frozen one), and this lease is 1 s.
            expiring.extend(claimed(full, args.expired - len(expiring), short, SHORT_WORKER))
        time.sleep(1.2)
        step(r, names, rows, f"reaper recovering {len(expiring):,} expired leases",
             lambda: reaper.run_once(r, full))

        dead: list[str] = []
        while len(dead) < args.dead:
            for lease in claimed(full, args.dead - len(dead)):
                scripts.run(r, fail.fail_op(full, lease, error="ValueError: boom",
                                            retry_delay_ms=None, worker_id=WORKER))
                dead.append(lease[0])
        step(r, names, rows, f"replay of {len(dead):,} dead letters by id",
             lambda: big.replay(dead))
    finally:
        r.close()
        server.stop()
    print(h.load_line(), "(after)\n")
    print(f"Script calls as Redis timed them (ms), {args.per_call:,} jobs per call at most:\n")
    print(h.table(["step", "script calls", "mean, ms", "slowest, ms", "step took"], rows))
    print(f"\nRates, {args.rounds} interleaved rounds of {RATE_JOBS:,} jobs (median, min-max):\n")
    print(h.table(["queue", "enqueue jobs/s (1 call per job)", "claim + ack jobs/s (16 per call)"], [
        ["holding only the measured jobs", enqueue_rates["small"].fmt(), claim_rates["small"].fmt()],
        [f"+ {args.queued:,} queued", enqueue_rates["full"].fmt(), claim_rates["full"].fmt()],
    ]))
    print(f"ratio full / small: enqueue {enqueue_rates['full'].median / enqueue_rates['small'].median:.2f}, "
          f"claim + ack {claim_rates['full'].median / claim_rates['small'].median:.2f}")


if __name__ == "__main__":
    _results.run_and_keep(main, __file__)
