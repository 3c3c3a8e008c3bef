"""antre against arq, rq, saq, celery, dramatiq, huey and taskiq, on one redis-server.

Each library runs its default production worker with no-op jobs. Per library: enqueue rate (one
call per job; bulk API where it has one), drain rate of queued jobs with 1 and with 2 worker
processes (10,000 jobs, or 100,000 for a library that drains 10,000 in under a second, so that
no rate rests on a fraction of a second: one uncounted drain of 10,000 decides), Redis commands
per job, Redis memory per queued job, median of 3 runs with
min-max, the ratio antre / peer for each figure, and what its worker does when SIGKILLed mid-job
(measured: the worker is killed, a replacement started at once, and the job watched).

    pip install -e '.[bench]'
    python bench/peers.py                  # the full run (about 20 minutes on 2 cores)
    python bench/peers.py --quick          # 1 run, 2,000 jobs, short kill window: a smoke check
    python bench/peers.py --only antre,dramatiq --runs 5

A library that fails prints its error and the run goes on without it.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
import traceback
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench import _harness as h
from bench import _results

LIBRARIES = ["antre", "arq", "rq", "saq", "celery", "dramatiq", "huey", "taskiq"]
SMALL_DRAIN, LARGE_DRAIN = 10_000, 100_000


@dataclass
class Figures:
    name: str
    single: h.Series = field(default_factory=h.Series)
    bulk: h.Series = field(default_factory=h.Series)
    drain1: h.Series = field(default_factory=h.Series)
    drain2: h.Series = field(default_factory=h.Series)
    cmds: h.Series = field(default_factory=h.Series)
    scripts: h.Series = field(default_factory=h.Series)
    enqueue_cmds: h.Series = field(default_factory=h.Series)
    memory: h.Series = field(default_factory=h.Series)
    kill: str = "-"
    note: str = ""
    #: Jobs per drain for this library (decided by its sizing drain, or by --jobs).
    drain_jobs: int = 0
    errors: list[str] = field(default_factory=list)


def measure_run(figures: Figures, run: int, r: object, url: str, args: argparse.Namespace) -> None:
    """One run of one library: single-call enqueue rate, then drains with 1 and 2 processes."""
    from bench.adapters import load
    adapter = load(figures.name)
    figures.note = adapter.processes_note
    if not figures.drain_jobs:
        figures.drain_jobs = drain_size(adapter, r, url, args.jobs)
    jobs = figures.drain_jobs
    figures.note += f"; drains of {jobs:,} jobs"
    figures.single.add(h.single_enqueue_rate(adapter, r, args.single_jobs))
    for processes, series in ((1, figures.drain1), (2, figures.drain2)):
        result = h.drain_run(adapter, r, url, jobs=jobs, processes=processes)
        series.add(result.drain_rate)
        if adapter.has_bulk:
            figures.bulk.add(result.enqueue_rate)
        if processes == 1:
            figures.cmds.add(result.drain_cmds_per_job)
            figures.scripts.add(result.drain_scripts_per_job)
            figures.enqueue_cmds.add(result.enqueue_cmds_per_job)
        print(f"  run {run + 1}, {figures.name}, {processes} process(es): drain "
              f"{result.drain_rate:,.0f} jobs/s, {result.drain_cmds_per_job:.2f} commands/job; "
              f"{h.load_line()}", flush=True)


def drain_size(adapter: h.Adapter, r: Any, url: str, requested: int | None) -> int:
    """Jobs per drain: ``requested``, or (None) 10,000, and 100,000 when an uncounted drain of
    10,000 with one process took under a second; never more than the adapter's own limit."""
    limit = getattr(adapter, "max_drain_jobs", None)
    if requested is None:
        requested = SMALL_DRAIN
        if limit is None or limit >= LARGE_DRAIN:
            sizing = h.drain_run(adapter, r, url, jobs=SMALL_DRAIN, processes=1)
            if sizing.drain_rate > SMALL_DRAIN:
                requested = LARGE_DRAIN
            print(f"  sizing, {adapter.name}: {SMALL_DRAIN:,} jobs drained at "
                  f"{sizing.drain_rate:,.0f} jobs/s: drains of {requested:,}", flush=True)
    return min(requested, limit or requested)


def kill_child(name: str) -> int:
    """Runs one library's kill test (in its own process and Redis database) and prints JSON."""
    from bench.adapters import load
    url = os.environ["BENCH_REDIS_URL"]
    window = float(os.environ["BENCH_KILL_WINDOW"])
    r = h.client(url)
    try:
        result = h.kill_mid_job(load(name), r, url, window_s=window)
        print(json.dumps({"verdict": result.verdict, "after_s": result.redelivered_after_s}))
    except Exception as exc:
        print(json.dumps({"verdict": f"error: {type(exc).__name__}: {str(exc)[:300]}", "after_s": None}))
    return 0


def kill_tests(names: list[str], base_url: str, window_s: float) -> dict[str, str]:
    """All libraries at once, each in its own Redis database, since each mostly waits."""
    procs = {}
    for db, name in enumerate(names, start=1):
        env = dict(os.environ, BENCH_REDIS_URL=base_url.rsplit("/", 1)[0] + f"/{db}",
                   BENCH_KILL_WINDOW=str(window_s), BENCH_RESULTS_DIR="")
        procs[name] = subprocess.Popen([sys.executable, __file__, "--kill-child", name], env=env,
                                       stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    verdicts = {}
    for name, proc in procs.items():
        try:
            out, err = proc.communicate(timeout=window_s + 240)
            lines = [line for line in out.splitlines() if line.startswith("{")]
            verdicts[name] = json.loads(lines[-1])["verdict"] if lines else f"error: {err.strip()[-300:]}"
        except subprocess.TimeoutExpired:
            proc.kill()
            verdicts[name] = "error: kill test timed out"
    return verdicts


def ratio(a: h.Series, b: h.Series) -> str:
    if not a.values or not b.values or not b.median:
        return "-"
    return f"{a.median / b.median:.2f}x"


def best_peer_rows(antre: Figures, peers: list[Figures]) -> list[list[str]]:
    """Per column, antre's median against the best peer's (the highest rate, the fewest
    bytes), and whether antre is ahead: the goal is every column ahead."""
    rows = []
    for column, attr, higher_is_better in (
            ("enqueue, 1 call/job (jobs/s)", "single", True),
            ("enqueue, bulk or the peer's best (jobs/s)", "bulk", True),
            ("drain, 1 process (jobs/s)", "drain1", True),
            ("drain, 2 processes (jobs/s)", "drain2", True),
            ("memory per queued job (bytes)", "memory", False)):
        mine = getattr(antre, attr)
        # A peer without a bulk API enqueues its fastest way: one call per job.
        series = [(f.single if attr == "bulk" and not f.bulk.values else getattr(f, attr), f.name)
                  for f in peers]
        theirs = [(values.median, name) for values, name in series if values.values]
        if not mine.values or not theirs:
            continue
        best, name = max(theirs) if higher_is_better else min(theirs)
        ahead = mine.median > best if higher_is_better else mine.median < best
        rows.append([column, f"{mine.median:,.0f}", f"{name} {best:,.0f}",
                     f"{mine.median / best:.2f}x" if best else "-",
                     "ahead" if ahead else "BEHIND"])
    return rows


def report(results: dict[str, Figures], args: argparse.Namespace) -> None:
    sizes = ", ".join(f"{f.name} {f.drain_jobs:,}" for f in results.values() if f.drain_jobs)
    print(f"\n## Peers: no-op jobs per drain: {sizes}; median of {args.runs} (min-max); "
          f"{h.load_line()}\n")
    rows = []
    for f in results.values():
        if f.errors and not f.drain1.values:
            rows.append([f.name, "failed: " + f.errors[0][:60], "", "", "", "", "", ""])
            continue
        rows.append([f.name, f.single.fmt(), f.bulk.fmt(), f.drain1.fmt(), f.drain2.fmt(),
                     f.cmds.fmt(2), f.scripts.fmt(2), f.memory.fmt()])
    print(h.table(["library", "enqueue jobs/s (1 call/job)", "enqueue jobs/s (bulk)",
                   "drain jobs/s, 1 process", "drain jobs/s, 2 processes",
                   "Redis cmds/job (drain, incl. Lua)", "script calls/job",
                   f"memory bytes/job ({args.memory_jobs:,} queued)"], rows))
    antre = results.get("antre")
    if antre and antre.drain1.values:
        print("\n## Ratio antre / peer (rates: higher is better for antre; commands, memory: lower is)\n")
        rows = []
        for f in results.values():
            if f.name == "antre" or not f.drain1.values:
                continue
            rows.append([f.name, ratio(antre.single, f.single), ratio(antre.bulk, f.bulk or f.single),
                         ratio(antre.drain1, f.drain1), ratio(antre.drain2, f.drain2),
                         ratio(antre.cmds, f.cmds), ratio(antre.memory, f.memory)])
        print(h.table(["vs", "enqueue 1 call/job", "enqueue bulk (peer: its best)", "drain 1 process",
                       "drain 2 processes", "cmds/job", "memory/job"], rows))
        peers = [f for f in results.values() if f.name != "antre" and f.drain1.values]
        if peers:
            print("\n## antre against the best peer of this run, column by column\n")
            print(h.table(["column", "antre", "best peer", "antre / best", "verdict"],
                          best_peer_rows(antre, peers)))
    print("\n## SIGKILL mid-job (default worker; replacement started at once; "
          f"watched {args.kill_window:.0f} s)\n")
    print(h.table(["library", "what happened to the running job"],
                  [[f.name, f.kill] for f in results.values()]))
    print("\n## What \"N worker processes\" means per library\n")
    print(h.table(["library", "started as"], [[f.name, f.note or "-"] for f in results.values()]))
    for f in results.values():
        for error in f.errors:
            print(f"\n{f.name} error: {error}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--only", help="comma-separated subset of " + ",".join(LIBRARIES))
    parser.add_argument("--jobs", type=int, default=None,
                        help="jobs per drain for every library (default: 10,000, or 100,000 "
                             "where 10,000 drain in under a second)")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--single-jobs", type=int, default=2_000,
                        help="jobs enqueued one call each for the single-call rate")
    parser.add_argument("--memory-jobs", type=int, default=100_000, help="0 skips the memory figure")
    parser.add_argument("--kill-window", type=float, default=120.0,
                        help="seconds to watch for a killed job to run again")
    parser.add_argument("--no-kill", action="store_true", help="skip the kill tests")
    parser.add_argument("--kill-only", action="store_true", help="only the kill tests")
    parser.add_argument("--quick", action="store_true", help="1 run, 2,000 jobs, 40 s kill window")
    parser.add_argument("--kill-child", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.kill_child:
        return kill_child(args.kill_child)
    if args.quick:
        args.jobs, args.runs, args.single_jobs, args.memory_jobs, args.kill_window = 2_000, 1, 500, 10_000, 40
    names = args.only.split(",") if args.only else LIBRARIES
    unknown = set(names) - set(LIBRARIES)
    if unknown:
        parser.error(f"--only: unknown {sorted(unknown)}; choose from {LIBRARIES}")

    server = h.start_redis()
    os.environ["BENCH_REDIS_URL"] = server.url
    r = h.client(server.url)
    results: dict[str, Figures] = {}
    started = time.monotonic()
    try:
        print(f"redis-server {r.info('server')['redis_version']} on {server.url}; {h.load_line()}",
              flush=True)
        # Runs outer, libraries inner: load from other processes on the machine then spreads
        # over every library instead of landing on whichever ran at that moment.
        for name in names:
            results[name] = Figures(name)
        for run in range(0 if args.kill_only else args.runs):
            for name in names:
                figures = results[name]
                if figures.errors:
                    continue
                try:
                    measure_run(figures, run, r, server.url, args)
                except Exception as exc:
                    print(f"  {name} FAILED: {type(exc).__name__}: {exc}", flush=True)
                    traceback.print_exc(limit=3)
                    figures.errors.append(f"{type(exc).__name__}: {exc}"[:2000])
        if args.memory_jobs and not args.kill_only:
            for name in names:
                if results[name].errors:
                    continue
                try:
                    from bench.adapters import load
                    results[name].memory.add(h.memory_per_job(load(name), r, args.memory_jobs))
                except Exception as exc:
                    results[name].errors.append(f"memory: {type(exc).__name__}: {exc}"[:2000])
        if not args.no_kill:
            print(f"kill tests ({args.kill_window:.0f} s window, all libraries at once)...", flush=True)
            r.flushall()
            for name, verdict in kill_tests(names, server.url, args.kill_window).items():
                results[name].kill = verdict
        report(results, args)
        print(f"\ntotal wall time {time.monotonic() - started:.0f} s")
        return 0
    finally:
        r.close()
        server.stop()


if __name__ == "__main__":
    _results.run_and_keep(main, __file__)
