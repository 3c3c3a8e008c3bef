"""Loopback load check of the HTTP API: N enqueues from C concurrent aiohttp clients.

Starts ``antre api`` as a subprocess on a free loopback port (unless ``--api-url`` points at a
running one), sends ``--total`` POST /v1/queues/<queue>/jobs requests from ``--concurrency``
clients, each with its own connection pool, then checks in Redis that every acknowledged job
exists. Prints requests/s and latency percentiles (and a JSON line with ``--json``).

    python bench/api_load.py --redis-url redis://127.0.0.1:6390/0 --total 2000 --concurrency 20

Loopback only, bounded: it is a smoke measurement, not a benchmark of a deployment.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from pathlib import Path

import aiohttp
import redis
from antre import Queue

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench import _results


@dataclass
class LoadResult:
    total: int
    concurrency: int
    seconds: float
    requests_per_s: float
    p50_ms: float
    p90_ms: float
    p99_ms: float
    max_ms: float
    statuses: dict[str, int]
    job_ids: int
    jobs_found: int


def _percentile(sorted_values: list[float], fraction: float) -> float:
    index = min(round(fraction * (len(sorted_values) - 1)), len(sorted_values) - 1)
    return sorted_values[index]


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@contextlib.contextmanager
def api_process(redis_url: str, *, token: str, queue: str) -> Iterator[str]:
    """``antre api`` on a free loopback port; yields its base URL once /healthz answers."""
    port = _free_port()
    env = {**os.environ, "ANTRE_API_TOKEN": token, "ANTRE_LOG_LEVEL": "WARNING"}
    process = subprocess.Popen(
        [sys.executable, "-m", "antre", "api", "--host", "127.0.0.1", "--port", str(port),
         "--redis-url", redis_url, "--queue", queue], env=env, stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE)
    base_url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 20
        while True:
            if process.poll() is not None:
                raise RuntimeError(f"antre api exited: {process.stderr.read().decode()[-2000:]}"
                                   if process.stderr else "antre api exited")
            with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), 0.2):
                break
            if time.monotonic() > deadline:
                raise RuntimeError("antre api did not start listening within 20 s")
            time.sleep(0.02)
        yield base_url
    finally:
        process.terminate()
        try:
            process.wait(10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        if process.stderr:
            process.stderr.close()


async def run_load(base_url: str, *, queue: str, total: int, concurrency: int,
                   token: str | None) -> tuple[list[float], dict[str, int], list[str], float]:
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    latencies: list[float] = []
    statuses: dict[str, int] = {}
    job_ids: list[str] = []
    remaining = iter(range(total))
    url = f"{base_url}/v1/queues/{queue}/jobs"

    async def client() -> None:
        async with aiohttp.ClientSession(headers=headers) as session:
            for i in remaining:
                started = time.perf_counter()
                async with session.post(url, json={"type": "bench", "payload": {"i": i}}) as resp:
                    body = await resp.json()
                latencies.append(time.perf_counter() - started)
                statuses[str(resp.status)] = statuses.get(str(resp.status), 0) + 1
                if "job_id" in body:
                    job_ids.append(body["job_id"])

    started = time.perf_counter()
    await asyncio.gather(*(client() for _ in range(concurrency)))
    return latencies, statuses, job_ids, time.perf_counter() - started


def measure(redis_url: str, *, total: int = 2000, concurrency: int = 20, queue: str = "bench",
            api_url: str | None = None, token: str = "bench-token") -> LoadResult:
    with contextlib.ExitStack() as stack:
        base_url = api_url or stack.enter_context(api_process(redis_url, token=token, queue=queue))
        latencies, statuses, job_ids, seconds = asyncio.run(
            run_load(base_url, queue=queue, total=total, concurrency=concurrency, token=token))
    target = Queue.from_url(redis_url, queue)
    try:
        pipe = target.redis.pipeline(transaction=False)
        for job_id in job_ids:  # not claimed yet: a field of the queued Hash, or its own Hash
            pipe.hexists(target.keys.queued, job_id)
            pipe.exists(target.keys.job(job_id))
        replies = pipe.execute()
        found = sum(1 for field, key in zip(replies[::2], replies[1::2], strict=True)
                    if field or key)
    finally:
        target.close()
    ordered = sorted(latencies)
    return LoadResult(
        total=total, concurrency=concurrency, seconds=round(seconds, 3),
        requests_per_s=round(total / seconds, 1),
        p50_ms=round(_percentile(ordered, 0.50) * 1000, 2),
        p90_ms=round(_percentile(ordered, 0.90) * 1000, 2),
        p99_ms=round(_percentile(ordered, 0.99) * 1000, 2),
        max_ms=round(ordered[-1] * 1000, 2), statuses=statuses,
        job_ids=len(set(job_ids)), jobs_found=found,
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--redis-url", default=os.environ.get("ANTRE_REDIS_URL"), required=
                        "ANTRE_REDIS_URL" not in os.environ,
                        help="Redis to enqueue into (a test instance: jobs are left behind)")
    parser.add_argument("--api-url", help="a running API (default: start one on loopback)")
    parser.add_argument("--token", default="bench-token")
    parser.add_argument("--queue", default="bench")
    parser.add_argument("--total", type=int, default=2000)
    parser.add_argument("--concurrency", type=int, default=20)
    parser.add_argument("--json", action="store_true", help="also print one JSON line")
    args = parser.parse_args()
    try:
        result = measure(args.redis_url, total=args.total, concurrency=args.concurrency,
                         queue=args.queue, api_url=args.api_url, token=args.token)
    except (RuntimeError, redis.ConnectionError, aiohttp.ClientError) as exc:
        print(f"api_load: {exc}", file=sys.stderr)
        return 1
    print(f"{result.total} enqueues, {result.concurrency} clients: "
          f"{result.requests_per_s} req/s; latency p50 {result.p50_ms} ms, "
          f"p90 {result.p90_ms} ms, p99 {result.p99_ms} ms, max {result.max_ms} ms; "
          f"statuses {result.statuses}; {result.jobs_found}/{result.job_ids} jobs found in Redis")
    if args.json:
        print(json.dumps(asdict(result)))
    return 0 if result.jobs_found == result.total else 1


if __name__ == "__main__":
    _results.run_and_keep(main, __file__)
