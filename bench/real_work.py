"""Real work: handlers that wait 10 ms on I/O, at concurrency 16 and 100, one worker process.

Plain ``def`` handlers (``time.sleep``) against the threaded peers (dramatiq ``--threads``,
celery ``-P threads -c``, huey ``-k thread -w``), async handlers (``asyncio.sleep``) against the
asyncio peers (taskiq ``--max-async-tasks``, saq's ``concurrency``); antre runs both with
``--concurrency`` and nothing else changed. Each cell drains queued jobs as bench/peers.py does
(parked, workers warmed up, then released); the ceiling is concurrency / 10 ms.

    python bench/real_work.py
    python bench/real_work.py --only antre,dramatiq --runs 5 --cells def:16,async:100
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench import _harness as h
from bench import _results

LIBRARIES = ["antre", "dramatiq", "celery", "huey", "taskiq", "saq"]
CELLS = ["def:16", "def:100", "async:16", "async:100"]
#: Seconds of work per drain at the ceiling rate, so start-up never dominates.
DRAIN_S = 2.0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--only", help="comma-separated subset of " + ",".join(LIBRARIES))
    parser.add_argument("--cells", default=",".join(CELLS), help="style:concurrency, comma-separated")
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    names = args.only.split(",") if args.only else LIBRARIES
    cells = [(style, int(c)) for style, c in (cell.split(":") for cell in args.cells.split(","))]
    rates: dict[tuple[str, int, str], h.Series] = {}
    failed: dict[tuple[str, int, str], str] = {}
    started = time.monotonic()
    with h.bench_server() as (server, r):
        from bench.adapters import load
        adapters = {name: load(name) for name in names}
        for run in range(args.runs):
            for style, concurrency in cells:
                jobs = int(concurrency / 0.01 * DRAIN_S)
                for name, adapter in adapters.items():
                    key = (style, concurrency, name)
                    if style not in adapter.io_styles or key in failed:
                        continue
                    try:
                        result = h.drain_run(adapter, r, server.url, jobs=jobs, processes=1,
                                             kind=f"io_{style}",
                                             commands=[adapter.io_worker(style, concurrency)])
                    except Exception as exc:
                        failed[key] = f"{type(exc).__name__}: {str(exc)[:300]}"
                        print(f"  {name} {style}:{concurrency} FAILED: {failed[key]}", flush=True)
                        continue
                    rates.setdefault(key, h.Series()).add(result.drain_rate)
                    print(f"  run {run + 1}, {style} handlers, concurrency {concurrency}, {name}: "
                          f"{result.drain_rate:,.0f} jobs/s; {h.load_line()}", flush=True)
        print(f"\n## 10 ms of I/O per job, one worker process: jobs/s, median of {args.runs} "
              f"(min-max); {h.load_line()}\n")
        for style, concurrency in cells:
            rows = [[name, series.fmt(), f"{series.median / (concurrency / 0.01):.0%}"]
                    for (s, c, name), series in rates.items() if (s, c) == (style, concurrency)]
            if not rows:
                continue
            print(f"### {style} handlers, concurrency {concurrency} (ceiling "
                  f"{concurrency / 0.01:,.0f} jobs/s)\n")
            print(h.table(["library", "jobs/s", "of the ceiling"], rows))
            antre = rates.get((style, concurrency, "antre"))
            peers = {name: series for (s, c, name), series in rates.items()
                     if (s, c) == (style, concurrency) and name != "antre"}
            if antre and peers:
                best = max(peers, key=lambda n: peers[n].median)
                ratio = antre.median / peers[best].median
                print(f"\nantre / best peer ({best}): {ratio:.2f}x "
                      f"({'first' if ratio > 1 else 'NOT first'})\n")
        for key, error in failed.items():
            print(f"{key} failed: {error}")
        print(f"total wall time {time.monotonic() - started:.0f} s")
    return 0


if __name__ == "__main__":
    _results.run_and_keep(main, __file__)
