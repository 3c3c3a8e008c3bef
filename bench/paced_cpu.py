"""A worker's CPU per job when jobs arrive one at a time: one worker process per library with
its CLI's defaults, one producer (this script) sending ``--jobs`` jobs at ``--rate`` per second,
evenly spaced, one enqueue call per job. The worker's CPU (user + system, /proc) and Redis's
(``INFO cpu``) over the paced phase, per job, with the enqueue-to-start latency of the same jobs.

A drain batches claims and acks (about 60 us of antre worker CPU per job); at a rate the worker
keeps up with, each job is its own claim and its own ack, and this is what a job costs then.
The handlers write their start latency and return (bench/adapters/_record.py): ``async`` is
antre's ``async def`` handler, ``def`` its plain ``def`` one (run in a thread).

    python bench/paced_cpu.py                                 # antre async and def, huey
    python bench/paced_cpu.py --only antre --styles async --runs 5
    python bench/paced_cpu.py --instructions                  # under callgrind, 20 jobs/s

``--instructions`` runs each worker under valgrind's callgrind and counts the instructions it
executes (user space: the kernel's side of its system calls is not in it) over the paced phase,
per job: a count that hardly moves with the machine's load, where CPU times here vary by 20-30%
from run to run. A worker under callgrind runs about 50x slower, so the rate defaults to 20
jobs/s (each job still arrives alone) and the jobs to 500.

Runs are interleaved; each figure is the median over the runs (min-max), with the load average.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench import _harness as h
from bench import _results
from bench.latency import latencies, paced, percentile

#: (library, handler style) -> the job kind its adapter runs.
KINDS = {("antre", "async"): "latency", ("antre", "def"): "latency_def", ("huey", "def"): "latency"}


@dataclass
class Cell:
    #: CPU microseconds, or thousands of instructions with --instructions.
    worker_us: h.Series = field(default_factory=h.Series)
    redis_us: h.Series = field(default_factory=h.Series)
    p50_ms: h.Series = field(default_factory=h.Series)
    p99_ms: h.Series = field(default_factory=h.Series)


def measure(library: str, kind: str, cell: Cell, r: object, url: str,
            args: argparse.Namespace) -> str:
    from bench.adapters import load
    adapter = load(library)
    r.flushall()  # type: ignore[attr-defined]
    records = h.Records()
    dumps = records.dir / "callgrind"
    command = adapter.worker_commands(1)[0]
    if args.instructions:
        dumps.mkdir()
        command = ["valgrind", "--tool=callgrind", "--instr-atstart=no",
                   f"--callgrind-out-file={dumps}/cg.%p", *command]
    try:
        with h.workers(adapter, url, records, 1, commands=[command]) as group:
            h.warm_up(adapter, records, group, 1, start_timeout_s=300.0)
            send = adapter.sender(kind)
            time.sleep(0.3)
            if args.instructions:
                _callgrind(group, "--instr=on")
            cpu_before, redis_before = group.cpu_s(), h.redis_cpu_s(r)  # type: ignore[arg-type]
            paced(send, args.jobs, 1 / args.rate)
            started = latencies(records, 0, args.jobs, group)
            # The last jobs' acks: give them a moment to land inside the figure.
            time.sleep(0.5 if args.instructions else 0.05)
            worker_s = group.cpu_s() - cpu_before
            redis_s = h.redis_cpu_s(r) - redis_before  # type: ignore[arg-type]
            if args.instructions:
                _callgrind(group, "--dump")
                worker_s = sum(h.callgrind_totals(path) for path in dumps.glob("cg.*.*")) / 1e9
    finally:
        records.cleanup()
    unit = "k instructions" if args.instructions else "us"
    cell.worker_us.add(worker_s / args.jobs * 1e6)
    cell.redis_us.add(redis_s / args.jobs * 1e6)
    cell.p50_ms.add(percentile(started, 0.5))
    cell.p99_ms.add(percentile(started, 0.99))
    return (f"worker {worker_s / args.jobs * 1e6:.0f} {unit}/job, Redis "
            f"{redis_s / args.jobs * 1e6:.0f} us/job, p50 {percentile(started, 0.5):.2f} p99 "
            f"{percentile(started, 0.99):.2f} ms")


def _callgrind(group: h.Workers, option: str) -> None:
    for proc in group.alive():
        subprocess.run(["callgrind_control", option, str(proc.pid)], check=False,
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=60)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--only", default="antre,huey", help="antre, huey or both")
    parser.add_argument("--styles", default="async,def",
                        help="antre's handler styles: async, def or both (huey's is def)")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--jobs", type=int, help="jobs per run (default 3,000; 500 with "
                        "--instructions)")
    parser.add_argument("--rate", type=float, help="jobs per second offered (default 500; 20 "
                        "with --instructions)")
    parser.add_argument("--instructions", action="store_true",
                        help="count the worker's instructions under callgrind instead of its CPU")
    args = parser.parse_args()
    if args.jobs is None:
        args.jobs = 500 if args.instructions else 3000
    if args.rate is None:
        args.rate = 20.0 if args.instructions else 500.0
    styles = args.styles.split(",")
    cells = {key: Cell() for key in KINDS
             if key[0] in args.only.split(",") and (key[0] != "antre" or key[1] in styles)}
    if not cells:
        parser.error("nothing to run: see --only and --styles")
    with h.bench_server() as (server, r):
        for run in range(args.runs):
            print(f"run {run + 1}", flush=True)
            for (library, style), cell in cells.items():
                line = measure(library, KINDS[library, style], cell, r, server.url, args)
                print(f"  {library} {style}: {line}; {h.load_line()}", flush=True)
        print(f"\n## {args.jobs:,} jobs at {args.rate:,.0f} jobs/s, one enqueue call each: "
              f"median of {args.runs} runs (min-max); {h.load_line()}\n")
        worker_column = ("worker instructions/job, thousands" if args.instructions
                         else "worker CPU us/job")
        print(h.table(["library", "handler", worker_column, "Redis CPU us/job",
                       "start p50 ms", "start p99 ms"],
                      [[library, style, cell.worker_us.fmt(), cell.redis_us.fmt(),
                        cell.p50_ms.fmt(2), cell.p99_ms.fmt(2)]
                       for (library, style), cell in cells.items()]))
    return 0


if __name__ == "__main__":
    _results.run_and_keep(main, __file__)
