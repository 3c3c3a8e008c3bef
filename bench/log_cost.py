"""What the worker's logging costs: CPU of one ``antre worker`` process per no-op job, drained at
each log level, interleaved runs (median, min-max). The INFO/WARNING difference is what the
default level costs; DEBUG shows what a line per job would. It reports; it asserts nothing.

    python bench/log_cost.py                  # 20,000 jobs per drain, 3 runs per level
    python bench/log_cost.py --jobs 5000 --runs 1
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench import _harness as h
from bench import _results

LEVELS = ("WARNING", "INFO", "DEBUG")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=20_000)
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    server = h.start_redis()
    os.environ["BENCH_REDIS_URL"] = server.url
    from bench.adapters import load
    adapter = load("antre")
    r = h.client(server.url)
    cpu = {level: h.Series() for level in LEVELS}
    rate = {level: h.Series() for level in LEVELS}
    print(h.load_line(), "(before)")
    try:
        for _ in range(args.runs):
            for level in LEVELS:
                os.environ["ANTRE_LOG_LEVEL"] = level  # the workers' environment
                result = h.drain_run(adapter, r, server.url, jobs=args.jobs, processes=1)
                cpu[level].add(result.worker_cpu_s_per_job * 1e6)
                rate[level].add(result.drain_rate)
    finally:
        os.environ.pop("ANTRE_LOG_LEVEL", None)
        r.close()
        server.stop()
    print(h.load_line(), "(after)\n")
    base = cpu["WARNING"].median
    rows = [[level, cpu[level].fmt(1), f"{(cpu[level].median - base) / cpu[level].median:.0%}",
             rate[level].fmt()] for level in LEVELS]
    print(h.table(["log level", "worker CPU per job, us", "share of it spent logging",
                   "drain jobs/s"], rows))


if __name__ == "__main__":
    _results.run_and_keep(main, __file__)
