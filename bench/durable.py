"""What the durable option costs: enqueue and drain rates with ``durable_replicas`` 0 (Redis's
asynchronous replication) and 1 (each enqueue, claim, lease renewal and ack waits for one
replica, Redis WAIT in the same round trip), on a primary with one replica on this machine.
Median of N interleaved runs (min-max). It reports; it asserts nothing.

    python bench/durable.py            # 3 runs of 10,000 jobs, about 1 minute
    python bench/durable.py --quick    # 1 run of 2,000 jobs

On one machine the replica answers within a fraction of a millisecond; across availability
zones each durable write waits one more network round trip to the nearest replica, so the cost
grows with that latency (the bench adds none).
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import redis

from bench import _harness as h
from bench import _results

MODES = {"async": "0", "durable": "1"}


def replica_online(r: redis.Redis) -> bool:
    replica = r.info("replication").get("slave0")
    return isinstance(replica, dict) and replica.get("state") == "online"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--jobs", type=int, default=10_000, help="jobs per drain (default 10,000)")
    parser.add_argument("--single-jobs", type=int, default=3_000,
                        help="jobs for the one-call-per-job enqueue rate")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--quick", action="store_true", help="1 run, 2,000 jobs")
    args = parser.parse_args()
    if args.quick:
        args.jobs, args.single_jobs, args.runs = 2_000, 1_000, 1

    primary = h.start_redis("--repl-diskless-sync-delay", "0")
    replica = h.start_redis("--replicaof", "127.0.0.1", str(primary.port))
    os.environ["BENCH_REDIS_URL"] = primary.url
    from bench.adapters import load
    adapter = load("antre")
    r = h.client(primary.url)
    try:
        h.wait_until(lambda: replica_online(r), timeout_s=30, message="the replica online")
        print(f"antre durable option: primary + 1 replica, {args.jobs:,} no-op jobs per drain, "
              f"{args.runs} run(s); {h.load_line()}")
        single = {mode: h.Series() for mode in MODES}
        bulk = {mode: h.Series() for mode in MODES}
        drain = {mode: h.Series() for mode in MODES}
        for run in range(args.runs):
            for mode, replicas in MODES.items():
                os.environ["ANTRE_DURABLE_REPLICAS"] = replicas
                os.environ["ANTRE_DURABLE_TIMEOUT"] = "5"
                single[mode].add(h.single_enqueue_rate(adapter, r, args.single_jobs))
                result = h.drain_run(adapter, r, primary.url, jobs=args.jobs, processes=1)
                bulk[mode].add(result.enqueue_rate)
                drain[mode].add(result.drain_rate)
                print(f"  run {run + 1}, {mode}: enqueue {single[mode].values[-1]:,.0f} jobs/s, "
                      f"enqueue_many {result.enqueue_rate:,.0f} jobs/s, drain "
                      f"{result.drain_rate:,.0f} jobs/s", flush=True)
                time.sleep(0.2)
        rows = []
        for label, series in (("enqueue, one call per job", single),
                              ("enqueue_many (200 per round trip)", bulk),
                              (f"drain {args.jobs:,}, 1 worker process", drain)):
            ratio = series["durable"].median / series["async"].median
            rows.append([label, f"{series['async'].fmt()} jobs/s",
                         f"{series['durable'].fmt()} jobs/s", f"{ratio:.2f}"])
        print()
        print(h.table(["figure", "durable_replicas=0", "durable_replicas=1", "ratio"], rows))
        return 0
    finally:
        os.environ.pop("ANTRE_DURABLE_REPLICAS", None)
        r.close()
        replica.stop()
        primary.stop()


if __name__ == "__main__":
    _results.run_and_keep(main, __file__)
