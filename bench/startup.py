"""Scale from zero: a worker process's start to its first job done, against the peers.

For each library one no-op job is enqueued with no worker running, then one worker process is
spawned (its own CLI with its defaults, as ``bench/peers.py`` starts it) and the clock runs
from the spawn until the job has written its completion byte; the process is then stopped.
Runs are interleaved (run 1 of every library, then run 2 ...), medians of ``--runs``, and the
worker CPU time (user + system of the process group) beside the wall time, since on a shared
machine the CPU time is the steadier figure. It reports; it asserts nothing.

    python bench/startup.py                       # every installed peer, 7 runs
    python bench/startup.py --only antre,huey --runs 11
    python bench/startup.py --floor               # what the interpreter and the imports cost
    python bench/startup.py --instructions --only antre,huey --runs 3

``--instructions`` runs each worker under valgrind's callgrind instead and reports the machine
instructions its processes executed from the spawn to the first job done (the counters are
dumped the moment the job's completion byte appears). That count hardly moves with the machine's
load, where wall and CPU times on a shared 2-core machine vary by 20-50% between runs; it is
the figure to compare two versions of a worker by. A worker runs about 50x slower under
callgrind, so each run takes 10-30 s.
"""

from __future__ import annotations

import argparse
import compileall
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Final

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench import _harness as h
from bench import _results

#: Every library of bench/peers.py.
LIBRARIES = ("antre", "huey", "taskiq", "dramatiq", "saq", "celery", "arq", "rq")


def _children_cpu_s() -> float:
    usage = os.times()
    return usage.children_user + usage.children_system


def first_job(adapter: h.Adapter, url: str, *, timeout_s: float = 60.0,
              extra_args: tuple[str, ...] = ()) -> tuple[float, float]:
    """Seconds from the worker's spawn to its first job done, and the CPU seconds it used."""
    h.client(url).flushall()
    adapter.enqueue("noop", 1, bulk=False)
    records = h.Records()
    cpu_before = _children_cpu_s()
    try:
        group = h.Workers(h.child_env(url, records.dir), records.dir)
        start = time.perf_counter()
        group.start([*adapter.worker_commands(1)[0], *extra_args])
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


def first_job_instructions(adapter: h.Adapter, url: str, *, timeout_s: float = 300.0) -> int:
    """Instructions the worker's processes executed from its spawn to its first job done."""
    h.client(url).flushall()
    adapter.enqueue("noop", 1, bulk=False)
    records = h.Records()
    dumps = records.dir / "callgrind"
    dumps.mkdir()
    try:
        group = h.Workers(h.child_env(url, records.dir), records.dir)
        start = time.perf_counter()
        leader = group.start(["valgrind", "--tool=callgrind", "--trace-children=yes",
                              f"--callgrind-out-file={dumps}/cg.%p",
                              *adapter.worker_commands(1)[0]])
        try:
            while records.done() < 1:
                if time.perf_counter() - start > timeout_s or not group.alive():
                    raise h.BenchError(f"{adapter.name}: no job done\n" + group.tail())
                time.sleep(0.005)
            for pid in _process_group(leader.pid):
                subprocess.run(["callgrind_control", "--dump", str(pid)], check=False,
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=60)
            # A dump is written as "cg.<pid>.<n>"; the counts at exit ("cg.<pid>") are not used.
            return sum(h.callgrind_totals(path) for path in dumps.glob("cg.*.*"))
        finally:
            group.stop()
    finally:
        records.cleanup()


def _process_group(pgid: int) -> list[int]:
    pids = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        if int(fields[2]) == pgid:  # field 5 of /proc/<pid>/stat: the process group
            pids.append(int(stat.parent.name))
    return pids


def instructions(adapters: dict[str, h.Adapter], url: str, runs: int) -> None:
    counts: dict[str, h.Series] = {name: h.Series() for name in adapters}
    for _ in range(runs):
        for name, adapter in adapters.items():
            counts[name].add(first_job_instructions(adapter, url) / 1e6)
    print(h.table(["library", "instructions, spawn to first job done (millions)"],
                  [[name, counts[name].fmt(1)] for name in adapters]))
    if "antre" in counts:
        for name in adapters:
            if name != "antre":
                print(f"antre / {name}: {counts['antre'].median / counts[name].median:.2f}x "
                      "instructions")


#: Processes that only start the interpreter and import: the floor under any worker's start.
#: "without OpenTelemetry" hides the SDK redis-py loads when it is installed (as in this venv;
#: not in the worker image) the way a missing package is hidden: an entry of None.
FLOOR: Final = (
    ("python -c pass", ["-c", "pass"]),
    ("import asyncio", ["-c", "import asyncio"]),
    ("import redis", ["-c", "import redis"]),
    ("import redis, without OpenTelemetry",
     ["-c", "import sys; sys.modules['opentelemetry'] = None; import redis"]),
    ("import antre", ["-c", "import antre"]),
    ("antre worker --help", ["-m", "antre", "worker", "--help"]),
    ("antre worker --help, without OpenTelemetry",
     ["-c", "import sys, runpy; sys.modules['opentelemetry'] = None; "
            "sys.argv = ['antre', 'worker', '--help']; runpy.run_module('antre', run_name='__main__')"]),
    ("import huey.consumer (huey's worker)", ["-c", "import huey.consumer"]),
    ("import the metrics server (antre worker --metrics-port)",
     ["-c", "import antre.metrics_server, antre.metrics, antre.depth_metrics"]),
)


def compile_sources() -> None:
    """Compile antre's modules and the bench's handler modules, as pip does on install."""
    import antre

    for directory in (Path(antre.__file__).parent, Path(__file__).parent):
        if not compileall.compile_dir(directory, quiet=1):
            raise h.BenchError(f"could not compile {directory}")


def floor(runs: int) -> None:
    """Wall and CPU time of each FLOOR process, interleaved, medians of ``runs``."""
    walls: dict[str, h.Series] = {label: h.Series() for label, _ in FLOOR}
    cpus: dict[str, h.Series] = {label: h.Series() for label, _ in FLOOR}
    print(h.load_line(), "(before)")
    for _ in range(runs):
        for label, args in FLOOR:
            cpu_before = _children_cpu_s()
            start = time.perf_counter()
            subprocess.run([sys.executable, *args], check=True, stdout=subprocess.DEVNULL,
                           stderr=subprocess.DEVNULL)
            walls[label].add(time.perf_counter() - start)
            cpus[label].add(_children_cpu_s() - cpu_before)
    print(h.load_line(), "(after)\n")
    print(h.table(["process", "wall, s", "CPU (user+sys), s"],
                  [[label, walls[label].fmt(3), cpus[label].fmt(3)] for label, _ in FLOOR]))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", default=",".join(LIBRARIES))
    parser.add_argument("--runs", type=int, default=7)
    parser.add_argument("--metrics", action="store_true",
                        help="antre's worker serves /metrics on a free port, as the operator "
                             "renders it (--metrics-port 0)")
    parser.add_argument("--floor", action="store_true",
                        help="only time the interpreter's start and the imports (no Redis, no job)")
    parser.add_argument("--instructions", action="store_true",
                        help="count the instructions to the first job under callgrind instead "
                             "of timing it")
    args = parser.parse_args()
    compile_sources()
    if args.floor:
        floor(args.runs)
        return
    server, adapters = h.start_with_adapters(args.only)
    if args.instructions:
        try:
            instructions(adapters, server.url, args.runs)
        finally:
            server.stop()
        return
    walls: dict[str, h.Series] = {name: h.Series() for name in adapters}
    cpus: dict[str, h.Series] = {name: h.Series() for name in adapters}
    print(h.load_line(), "(before)")
    try:
        for _ in range(args.runs):
            for name, adapter in adapters.items():
                extra = ("--metrics-port", "0") if args.metrics and name == "antre" else ()
                wall, cpu = first_job(adapter, server.url, extra_args=extra)
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
    _results.run_and_keep(main, __file__)
