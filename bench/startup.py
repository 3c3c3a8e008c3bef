"""Scale from zero: a worker process's start to its first job done, against the peers.

For each library one no-op job is enqueued with no worker running, then one worker process is
spawned (its own CLI with its defaults, as ``bench/peers.py`` starts it) and the clock runs
from the spawn until the job has written its completion byte; the process is then stopped.
Runs are interleaved (run 1 of every library, then run 2 ...), medians of ``--runs``, and the
worker CPU time (user + system of the process group) beside the wall time, since on a shared
machine the CPU time is the steadier figure. It reports; it asserts nothing.

    python bench/startup.py                       # every installed peer, 7 runs
    python bench/startup.py --only antre,huey --runs 11
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench import _harness as h

#: Every library of bench/peers.py.
LIBRARIES = ("antre", "huey", "taskiq", "dramatiq", "saq", "celery", "arq", "rq")


def _children_cpu_s() -> float:
    usage = os.times()
    return usage.children_user + usage.children_system


def first_job(adapter: h.Adapter, url: str, *, timeout_s: float = 60.0) -> tuple[float, float]:
    """Seconds from the worker's spawn to its first job done, and the CPU seconds it used."""
    h.client(url).flushall()
    adapter.enqueue("noop", 1, bulk=False)
    records = h.Records()
    cpu_before = _children_cpu_s()
    try:
        group = h.Workers(h.child_env(url, records.dir), records.dir)
        start = time.perf_counter()
        group.start(adapter.worker_commands(1)[0])
        try:
            while records.done() < 1:
                if time.perf_counter() - start > timeout_s or not group.alive():
                    raise h.BenchError(f"{adapter.name}: no job done\n" + group.tail())
                time.sleep(0.0005)
            took = time.perf_counter() - start
        finally:
            group.stop()
        return took, _children_cpu_s() - cpu_before
    finally:
        records.cleanup()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", default=",".join(LIBRARIES))
    parser.add_argument("--runs", type=int, default=7)
    args = parser.parse_args()
    server, adapters = h.start_with_adapters(args.only)
    walls: dict[str, h.Series] = {name: h.Series() for name in adapters}
    cpus: dict[str, h.Series] = {name: h.Series() for name in adapters}
    print(h.load_line(), "(before)")
    try:
        for _ in range(args.runs):
            for name, adapter in adapters.items():
                wall, cpu = first_job(adapter, server.url)
                walls[name].add(wall)
                cpus[name].add(cpu)
    finally:
        server.stop()
    print(h.load_line(), "(after)\n")
    rows = [[name, walls[name].fmt(3), cpus[name].fmt(3)] for name in adapters]
    print(h.table(["library", "spawn to first job done, s", "worker CPU (user+sys), s"], rows))
    if "antre" in walls:
        for name in adapters:
            if name != "antre":
                print(f"antre / {name}: {walls['antre'].median / walls[name].median:.2f}x "
                      f"wall, {cpus['antre'].median / cpus[name].median:.2f}x CPU")


if __name__ == "__main__":
    main()
