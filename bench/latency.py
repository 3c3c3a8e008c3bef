"""Enqueue to handler start, p50 and p99: antre against the peers, on an idle queue and under load.

One worker process per library with its CLI's defaults, one producer (this script) sending one
job per call through a client kept open. Each job carries ``time.time()`` read just before its
enqueue call; the handler writes how long ago that was when it starts (bench/adapters/_record.py).
The enqueue call is inside the figure for every library alike.

- **idle**: a job every 20 ms (the worker is waiting on an empty queue at each arrival);
- **loaded**: jobs sent at ``--rate`` per second, evenly spaced, for ``--seconds``.

    python bench/latency.py                       # antre, huey, taskiq, dramatiq, saq, celery
    python bench/latency.py --rate 500            # the loaded phase at 500 jobs/s
    python bench/latency.py --only antre,huey --runs 5 --rate 1000

Runs are interleaved (run 1 of every library, then run 2...); each figure is the median over the
runs of that run's percentile, with the range in brackets, and the load average is printed.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench import _harness as h
from bench import _results

LIBRARIES = ["antre", "huey", "taskiq", "dramatiq", "saq", "celery"]
IDLE_GAP_S = 0.02


@dataclass
class Figures:
    idle_p50: h.Series = field(default_factory=h.Series)
    idle_p99: h.Series = field(default_factory=h.Series)
    loaded_p50: h.Series = field(default_factory=h.Series)
    loaded_p99: h.Series = field(default_factory=h.Series)
    sent_rate: h.Series = field(default_factory=h.Series)
    #: Median time the producer's enqueue call took (idle phase): part of every latency.
    enqueue_call: h.Series = field(default_factory=h.Series)


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(int(q * len(ordered)), len(ordered) - 1)]


def paced(send: object, count: int, gap_s: float) -> tuple[float, float]:
    """Sends ``count`` jobs ``gap_s`` apart (on a schedule: a late send does not push the next
    ones back); returns the rate achieved and the median enqueue call, in ms."""
    assert callable(send)
    calls = []
    start = time.perf_counter()
    for i in range(count):
        delay = start + i * gap_s - time.perf_counter()
        if delay > 0:
            time.sleep(delay)
        called = time.perf_counter()
        send(f"{time.time():.6f}")
        calls.append(time.perf_counter() - called)
    took = time.perf_counter() - start
    return (count / took if took else float("nan")), statistics.median(calls) * 1000


def latencies(records: h.Records, first: int, count: int, group: h.Workers,
              timeout_s: float = 60) -> list[float]:
    """Milliseconds, of the latency lines ``first`` to ``first + count`` (the workers keep the
    file open, so it grows across phases)."""
    path = records.dir / "latency"
    deadline = time.monotonic() + timeout_s
    while True:
        lines = path.read_text().splitlines() if path.exists() else []
        if len(lines) >= first + count:
            return [float(line) * 1000 for line in lines[first:first + count]]
        if time.monotonic() > deadline or not group.alive():
            raise h.BenchError(f"{len(lines) - first} of {count} latency jobs ran\n" + group.tail())
        time.sleep(0.05)


def measure(name: str, figures: Figures, r: object, url: str, args: argparse.Namespace) -> None:
    from bench.adapters import load
    adapter = load(name)
    r.flushall()  # type: ignore[attr-defined]
    records = h.Records()
    try:
        with h.workers(adapter, url, records, 1) as group:
            h.warm_up(adapter, records, group, 1)
            send = adapter.sender("latency")
            time.sleep(0.3)
            _, enqueue_call_ms = paced(send, args.idle_jobs, IDLE_GAP_S)
            idle = latencies(records, 0, args.idle_jobs, group)
            count = int(args.rate * args.seconds)
            rate, _ = paced(send, count, 1 / args.rate)
            loaded = latencies(records, args.idle_jobs, count, group)
        figures.idle_p50.add(percentile(idle, 0.5))
        figures.idle_p99.add(percentile(idle, 0.99))
        figures.loaded_p50.add(percentile(loaded, 0.5))
        figures.loaded_p99.add(percentile(loaded, 0.99))
        figures.sent_rate.add(rate)
        figures.enqueue_call.add(enqueue_call_ms)
        print(f"  {name}: idle p50 {percentile(idle, 0.5):.2f} p99 {percentile(idle, 0.99):.2f} ms; "
              f"at {rate:,.0f}/s p50 {percentile(loaded, 0.5):.2f} p99 {percentile(loaded, 0.99):.2f} "
              f"ms (mean {statistics.mean(loaded):.2f}); {h.load_line()}", flush=True)
    finally:
        records.cleanup()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--only", help="comma-separated subset of " + ",".join(LIBRARIES))
    parser.add_argument("--runs", type=int, default=3)
    # 1,000: p99 is then the 10th slowest job, not the 2nd, which one stray wake-up decides.
    parser.add_argument("--idle-jobs", type=int, default=1000)
    parser.add_argument("--rate", type=float, default=1000.0,
                        help="jobs per second offered in the loaded phase")
    parser.add_argument("--seconds", type=float, default=6.0, help="length of the loaded phase")
    args = parser.parse_args()
    names = args.only.split(",") if args.only else LIBRARIES
    if set(names) - set(LIBRARIES):
        parser.error(f"--only: choose from {LIBRARIES}")
    results = {name: Figures() for name in names}
    failed: dict[str, str] = {}
    with h.bench_server() as (server, r):
        for run in range(args.runs):
            print(f"run {run + 1}", flush=True)
            for name in names:
                if name in failed:
                    continue
                try:
                    measure(name, results[name], r, server.url, args)
                except Exception as exc:
                    failed[name] = f"{type(exc).__name__}: {str(exc)[:300]}"
                    print(f"  {name} FAILED: {failed[name]}", flush=True)
        print(f"\n## Enqueue to handler start, ms: median of {args.runs} runs (min-max); "
              f"idle: {args.idle_jobs} jobs {IDLE_GAP_S * 1000:.0f} ms apart; loaded: "
              f"{args.rate:,.0f} jobs/s offered for {args.seconds:.0f} s; {h.load_line()}\n")
        rows = [[name, f.idle_p50.fmt(2), f.idle_p99.fmt(2), f.loaded_p50.fmt(2),
                 f.loaded_p99.fmt(2), f.sent_rate.fmt(), f.enqueue_call.fmt(2)]
                for name, f in results.items() if f.idle_p50.values]
        print(h.table(["library", "idle p50", "idle p99", "loaded p50", "loaded p99",
                       "loaded: jobs/s sent", "of which the enqueue call (idle, p50)"], rows))
        peers = {n: f for n, f in results.items() if n != "antre" and f.idle_p50.values}
        antre = results.get("antre")
        if antre and antre.idle_p50.values and peers:
            print()
            for column in ("idle_p50", "idle_p99", "loaded_p50", "loaded_p99"):
                best_name, best = min(peers.items(), key=lambda kv: getattr(kv[1], column).median)
                mine, theirs = getattr(antre, column).median, getattr(best, column).median
                print(f"{column}: antre {mine:.2f} ms, best peer {best_name} {theirs:.2f} ms "
                      f"({'lowest' if mine < theirs else 'NOT lowest'}; {mine / theirs:.2f}x)")
        for name, error in failed.items():
            print(f"\n{name} failed: {error}")
    return 0


if __name__ == "__main__":
    _results.run_and_keep(main, __file__)
