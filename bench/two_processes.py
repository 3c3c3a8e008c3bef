"""Two worker processes against one, and where the CPU goes: is the rest of the gain the
machine's (2 cores shared by the workers and Redis) or the worker's?

Drains ``--jobs`` queued no-op jobs with 1 and with 2 default worker processes, interleaved,
as bench/peers.py does, and reads the CPU time of the worker processes (/proc) and of
redis-server (``INFO cpu``) over each drain. "cores busy" is that CPU over the drain's wall time:
on 2 cores, a drain that keeps the workers and Redis at ~2 cores is bound by the machine, not
by contention inside the queue.

    python bench/two_processes.py
    python bench/two_processes.py --only antre,huey --runs 5 --jobs 50000
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench import _harness as h
from bench import _results


@dataclass
class Side:
    rate: h.Series = field(default_factory=h.Series)
    worker_us: h.Series = field(default_factory=h.Series)
    redis_us: h.Series = field(default_factory=h.Series)
    worker_cores: h.Series = field(default_factory=h.Series)
    redis_cores: h.Series = field(default_factory=h.Series)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--only", default="antre", help="comma-separated libraries (bench/peers.py)")
    parser.add_argument("--jobs", type=int, default=100_000)
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    names = args.only.split(",")
    sides = {(name, n): Side() for name in names for n in (1, 2)}
    with h.bench_server() as (server, r):
        from bench.adapters import load
        for run in range(args.runs):
            for name in names:
                for processes in (1, 2):
                    result = h.drain_run(load(name), r, server.url, jobs=args.jobs,
                                         processes=processes)
                    side = sides[(name, processes)]
                    side.rate.add(result.drain_rate)
                    side.worker_us.add(result.worker_cpu_s_per_job * 1e6)
                    side.redis_us.add(result.redis_cpu_s_per_job * 1e6)
                    side.worker_cores.add(result.worker_cpu_s_per_job * result.drain_rate)
                    side.redis_cores.add(result.redis_cpu_s_per_job * result.drain_rate)
                    print(f"  run {run + 1}, {name}, {processes} process(es): "
                          f"{result.drain_rate:,.0f} jobs/s; worker CPU "
                          f"{result.worker_cpu_s_per_job * 1e6:.1f} us/job, Redis "
                          f"{result.redis_cpu_s_per_job * 1e6:.1f} us/job; {h.load_line()}",
                          flush=True)
        print(f"\n## {args.jobs:,} no-op jobs, median of {args.runs} (min-max); {h.load_line()}\n")
        rows = []
        for (name, processes), side in sides.items():
            total = [w + rc for w, rc in zip(side.worker_cores.values, side.redis_cores.values,
                                             strict=True)]
            rows.append([name, str(processes), side.rate.fmt(), side.worker_us.fmt(1),
                         side.redis_us.fmt(1), side.worker_cores.fmt(2), side.redis_cores.fmt(2),
                         h.Series(total).fmt(2)])
        print(h.table(["library", "processes", "drain jobs/s", "worker CPU us/job",
                       "Redis CPU us/job", "worker cores busy", "Redis cores busy",
                       "cores busy, workers + Redis"], rows))
        print()
        for name in names:
            one, two = sides[(name, 1)], sides[(name, 2)]
            print(f"{name}: 2 processes / 1 = {two.rate.median / one.rate.median:.2f}x")
    return 0


if __name__ == "__main__":
    _results.run_and_keep(main, __file__)
