"""antre's own throughput: enqueue rate (one call per job, and ``enqueue_many``), drain rate of
10,000 no-op jobs with 1 and 2 ``antre worker`` processes (median of 3, min-max), Redis commands
per job (INFO commandstats) and Redis memory per queued job. It reports; it asserts nothing.

    python bench/throughput.py            # full run, about 2 minutes
    python bench/throughput.py --quick    # one run of 2,000 jobs, a smoke check

A redis-server is started on a free port and stopped at the end. The round-trip breakdown comes
from a separate small drain watched with MONITOR (which slows Redis, so it is never timed).
"""

from __future__ import annotations

import argparse
import collections
import sys
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench import _harness as h
from bench import _results


def round_trips(url: str, jobs: int) -> tuple[float, float, dict[str, float]]:
    """(client commands per job, commands inside scripts per job, per-command breakdown) for
    the enqueue_many + drain of ``jobs`` jobs by one worker, counted with MONITOR."""
    from bench.adapters import load
    adapter = load("antre")
    r = h.client(url)
    r.flushall()
    counts: collections.Counter[str] = collections.Counter()
    ready = threading.Event()

    def watch() -> None:
        with h.client(url).monitor() as monitor:
            ready.set()
            for entry in monitor.listen():
                command = entry["command"]
                if command.startswith("ECHO") and "monitor-stop" in command:
                    return
                lua = entry.get("client_type") == "lua"
                counts[("lua " if lua else "") + command.split(" ", 1)[0].upper()] += 1

    thread = threading.Thread(target=watch, daemon=True)
    thread.start()
    ready.wait(5)
    time.sleep(0.1)
    records = h.Records()
    try:
        adapter.enqueue("noop", jobs, bulk=True)
        with h.workers(adapter, url, records, 1):
            h.wait_until(lambda: records.done() >= jobs, timeout_s=120, message="monitored drain")
            time.sleep(0.3)  # the last batched ack
    finally:
        records.cleanup()
    r.echo("monitor-stop")
    thread.join(10)
    ignore = {"INFO", "ECHO", "FLUSHALL", "CLIENT", "HELLO"}
    kept = {k: v / jobs for k, v in counts.items() if k.split(" ")[-1] not in ignore}
    client_side = sum(v for k, v in kept.items() if not k.startswith("lua "))
    inside = sum(v for k, v in kept.items() if k.startswith("lua "))
    return client_side, inside, kept


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--jobs", type=int, default=10_000, help="jobs per drain (default 10,000)")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--single-jobs", type=int, default=3_000,
                        help="jobs for the one-call-per-job enqueue rate")
    parser.add_argument("--memory-jobs", type=int, default=100_000)
    parser.add_argument("--quick", action="store_true", help="1 run, 2,000 jobs")
    args = parser.parse_args()
    if args.quick:
        args.jobs, args.runs, args.single_jobs, args.memory_jobs = 2_000, 1, 1_000, 10_000

    server = h.start_redis()
    import os
    os.environ["BENCH_REDIS_URL"] = server.url
    from bench.adapters import load
    adapter = load("antre")
    r = h.client(server.url)
    try:
        print(f"antre throughput: {args.jobs:,} no-op jobs, {args.runs} run(s); {h.load_line()}")
        single, bulk = h.Series(), h.Series()
        drains = {1: h.Series(), 2: h.Series()}
        cmds = {1: h.Series(), 2: h.Series()}
        scripts = {1: h.Series(), 2: h.Series()}
        enq_cmds = h.Series()
        for run in range(args.runs):
            single.add(h.single_enqueue_rate(adapter, r, args.single_jobs))
            for processes in (1, 2):
                result = h.drain_run(adapter, r, server.url, jobs=args.jobs, processes=processes)
                bulk.add(result.enqueue_rate)
                enq_cmds.add(result.enqueue_cmds_per_job)
                drains[processes].add(result.drain_rate)
                cmds[processes].add(result.drain_cmds_per_job)
                scripts[processes].add(result.drain_scripts_per_job)
                print(f"  run {run + 1}, {processes} worker process(es): drain "
                      f"{result.drain_rate:,.0f} jobs/s, enqueue_many {result.enqueue_rate:,.0f} jobs/s",
                      flush=True)
        memory = h.memory_per_job(adapter, r, args.memory_jobs)
        client_side, inside, breakdown = round_trips(server.url, min(args.jobs, 2_000))
        rows = [
            ["enqueue, one call per job", f"{single.fmt()} jobs/s"],
            ["enqueue_many (200 per round trip)", f"{bulk.fmt()} jobs/s"],
            [f"drain {args.jobs:,}, 1 worker process", f"{drains[1].fmt()} jobs/s"],
            [f"drain {args.jobs:,}, 2 worker processes", f"{drains[2].fmt()} jobs/s"],
            ["Redis commands per job, enqueue_many (incl. inside Lua)", enq_cmds.fmt(2)],
            ["Redis commands per job, drain, 1 process (incl. inside Lua)", cmds[1].fmt(2)],
            ["Redis commands per job, drain, 2 processes (incl. inside Lua)", cmds[2].fmt(2)],
            ["script calls (round trips) per job, drain, 1 / 2 processes",
             f"{scripts[1].fmt(3)} / {scripts[2].fmt(3)}"],
            ["client commands per job, enqueue + drain (MONITOR)", f"{client_side:.3f}"],
            ["commands inside Lua per job, enqueue + drain (MONITOR)", f"{inside:.2f}"],
            [f"Redis memory per queued job ({args.memory_jobs:,} queued)", f"{memory:,.0f} bytes"],
        ]
        print()
        print(h.table(["figure", "median (min-max)"], rows))
        print("\nper-job commands seen by MONITOR (lua = inside a script):")
        for name, per_job in sorted(breakdown.items(), key=lambda kv: -kv[1]):
            if per_job >= 0.001:
                print(f"  {name:<20} {per_job:.3f}")
        return 0
    finally:
        r.close()
        server.stop()


if __name__ == "__main__":
    _results.run_and_keep(main, __file__)
