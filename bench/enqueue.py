"""Enqueue rates against the peers: one call per job, and async producers at concurrency 100.

Two figures per library, runs interleaved (run 1 of every library, then run 2 ...), medians of
``--runs`` with min-max, on one redis-server this script starts:

- **one call per job**: ``--jobs`` no-op jobs enqueued one call at a time, each call returning
  before the next starts (sync clients; taskiq, saq and arq await each call), as
  ``bench/peers.py`` measures it; beside the rate, the producer's CPU per job (user + system of
  this process, so the kernel's share of the socket is in it) and Redis's own time per job
  (``INFO commandstats`` usec), which together say where a call's time goes;
- **async, concurrency 100** (antre's AsyncQueue, taskiq, saq, arq): the same number of jobs
  enqueued 100 at a time with ``asyncio.gather``, as an async web service enqueues from many
  requests at once.

Each library's ratio is antre's median over its median; "fastest peer" is the peer with the
highest median in the same run. Beside the libraries, the same loop of bare redis-py ``PING``s
(one per job, on the same kind of client) gives the floor of one round trip per call on this
machine: no library that waits for Redis's reply on each call can beat it. It reports; it
asserts nothing.

Redis's share is the server's own CPU time (``INFO cpu``, user + system) per job: the scripts
and commands, parsing and the socket writes. (``INFO commandstats`` would count every command
inside a script twice: once alone and once in the script's own time.)

    python bench/enqueue.py                              # every installed peer, 5 runs
    python bench/enqueue.py --only antre,huey,taskiq --runs 7 --jobs 20000
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import redis

from bench import _harness as h
from bench import _results

LIBRARIES = ("antre", "huey", "dramatiq", "saq", "taskiq", "arq", "rq", "celery")
ASYNC_LIBRARIES = ("antre", "taskiq", "saq", "arq")
CONCURRENCY = 100


@dataclass
class Figures:
    rate: h.Series = field(default_factory=h.Series)
    client_cpu_us: h.Series = field(default_factory=h.Series)
    redis_us: h.Series = field(default_factory=h.Series)


#: The bare round trip, measured as if it were a library (never counted as a peer).
FLOOR = "(PING per call)"


def _redis_usec(r: redis.Redis) -> float:
    cpu = r.info("cpu")
    return (float(cpu["used_cpu_user"]) + float(cpu["used_cpu_sys"])) * 1e6


def _pings(r: redis.Redis, jobs: int) -> float:
    started = time.perf_counter()
    for _ in range(jobs):
        r.ping()
    return time.perf_counter() - started


def measure(r: redis.Redis, jobs: int, enqueue: Callable[[], float]) -> tuple[float, float, float]:
    """(jobs/s, producer CPU us per job, Redis us per job) of one enqueue run."""
    r.flushall()
    usec_before = _redis_usec(r)
    cpu_before = time.process_time()
    took = enqueue()
    cpu = time.process_time() - cpu_before
    usec = _redis_usec(r) - usec_before
    r.flushall()
    return jobs / took, cpu / jobs * 1e6, usec / jobs


def report(title: str, figures: dict[str, Figures]) -> None:
    print(f"\n{title}\n")
    rows = [[name, f.rate.fmt(), f.client_cpu_us.fmt(1), f.redis_us.fmt(1)]
            for name, f in figures.items()]
    print(h.table(["library", "jobs/s", "producer CPU, us/job", "Redis CPU, us/job"], rows))
    if "antre" not in figures:
        return
    antre = figures["antre"].rate.median
    peers = {name: f.rate.median for name, f in figures.items() if name not in ("antre", FLOOR)}
    if FLOOR in figures:
        print(f"antre / the floor of one round trip per call: "
              f"{antre / figures[FLOOR].rate.median:.2f}x")
    for name, rate in peers.items():
        print(f"antre / {name}: {antre / rate:.2f}x")
    if peers:
        fastest = max(peers, key=lambda name: peers[name])
        print(f"antre / fastest peer ({fastest}): {antre / peers[fastest]:.2f}x")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", default=",".join(LIBRARIES))
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--jobs", type=int, default=20_000, help="jobs per run and figure")
    args = parser.parse_args()
    server, adapters = h.start_with_adapters(args.only)
    single = {name: Figures() for name in [*adapters, FLOOR]}
    concurrent = {name: Figures() for name in adapters if name in ASYNC_LIBRARIES}
    r = h.client(server.url)
    print(h.load_line(), "(before)")
    try:
        for adapter in adapters.values():  # warm-up: imports, connections, script loads
            adapter.enqueue("noop", 200, bulk=False)
        for _ in range(args.runs):
            for name, figures in single.items():
                run: Callable[[], float] = (
                    (lambda: _pings(r, args.jobs)) if name == FLOOR else
                    (lambda a=adapters[name]: a.enqueue("noop", args.jobs, bulk=False)))
                rate, cpu, redis_us = measure(r, args.jobs, run)
                figures.rate.add(rate)
                figures.client_cpu_us.add(cpu)
                figures.redis_us.add(redis_us)
            for name, figures in concurrent.items():
                rate, cpu, redis_us = measure(r, args.jobs, lambda a=adapters[name]: (
                    a.enqueue_concurrently("noop", args.jobs, concurrency=CONCURRENCY)))
                figures.rate.add(rate)
                figures.client_cpu_us.add(cpu)
                figures.redis_us.add(redis_us)
    finally:
        r.close()
        server.stop()
    print(h.load_line(), "(after)")
    report(f"One call per job, {args.jobs:,} jobs, median of {args.runs} (min-max)", single)
    if concurrent:
        report(f"Async, {CONCURRENCY} concurrent enqueues (asyncio.gather), {args.jobs:,} jobs, "
               f"median of {args.runs} (min-max)", concurrent)


if __name__ == "__main__":
    _results.run_and_keep(main, __file__)
