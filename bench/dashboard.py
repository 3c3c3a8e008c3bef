"""The dashboard at scale: a million queued jobs and 100,000 dead letters.

Builds the state through the protocol scripts on a redis-server of its own (100,000 jobs
enqueued, claimed and failed permanently with one of five errors, then a million enqueued),
starts ``antre api --dashboard`` as a subprocess, signs in through the form, and measures:

- time to first byte of each page (plain HTTP, median of ``--runs``);
- full render of each page in headless Chromium (navigation start to the load event, styles
  and script included; median of ``--runs``);
- Redis commands per page load (INFO commandstats before and after, commands run inside
  scripts included; no live stream open, so nothing else runs): the first load of a page (it
  reads every dead letter it groups) and the next one (only dead letters it has not seen);
- Redis commands per live update: one open stream, then ten, on the overview and on a queue's
  page, over ``--ticks`` ticks.

    python bench/dashboard.py                 # ~2 minutes, most of it building the state
    python bench/dashboard.py --ready 100000 --dead 10000 --runs 3   # a quick look

Prints a table and, with ``--json``, one JSON line.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import redis
import requests
from antre import Queue, WorkerSettings
from antre.protocol import scripts
from antre.protocol.claim import claim_op
from antre.protocol.fail import fail_op

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "tests"))
sys.path.insert(0, str(REPO))

from redis_servers import RedisServer, free_port, wait_until  # noqa: E402

from bench import _results  # noqa: E402

QUEUE = "bench"
TOKEN = "bench-token"
ERRORS = ["ConnectionError: payments refused the connection", "TimeoutError: upstream took 30 s",
          "ValueError: invalid address", "KeyError: 'customer'", "Permanent: card declined"]
CHROMIUM = os.environ.get("ANTRE_CHROMIUM", "/usr/bin/chromium")
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                 "--disable-component-update", "--no-first-run"]


def commands(client: redis.Redis) -> int:
    """Commands Redis ran so far, those inside scripts included, INFO itself excluded."""
    return sum(v["calls"] for k, v in client.info("commandstats").items() if k != "cmdstat_info")


def build_state(client: redis.Redis, *, ready: int, dead: int) -> None:
    queue = Queue(client, QUEUE)
    started = time.perf_counter()
    queue.enqueue_many([("charge", {"order": i, "amount": 1299}) for i in range(dead)])
    worker = WorkerSettings(visibility_timeout_s=600)
    while True:
        claimed = scripts.run(client, claim_op(queue.settings, worker, worker_id="bench",
                                               max_jobs=1000)).jobs
        if not claimed:
            break
        for job in claimed:
            scripts.run(client, fail_op(queue.settings, (job.id, job.lease),
                                        error=ERRORS[int(job.id[-4:], 16) % len(ERRORS)],
                                        retry_delay_ms=None, worker_id="bench"))
    for first in range(0, ready, 50_000):
        queue.enqueue_many([("send_email", {"to": f"user{i}@example.com", "template": "welcome"})
                            for i in range(first, min(first + 50_000, ready))])
    depth = queue.stats()
    print(f"state: {depth.ready:,} ready, {depth.dead:,} dead, "
          f"{client.dbsize():,} keys, built in {time.perf_counter() - started:.0f} s",
          flush=True)


@contextmanager
def running_api(redis_url: str, log_dir: Path) -> Iterator[str]:
    port = free_port()
    env = {**os.environ, "ANTRE_API_TOKEN": TOKEN}
    with (log_dir / "api.log").open("wb") as log:
        process = subprocess.Popen(
            [sys.executable, "-m", "antre", "api", "--dashboard", "--redis-url", redis_url,
             "--queue", QUEUE, "--host", "127.0.0.1", "--port", str(port),
             "--log-level", "WARNING"], env=env, stdout=log, stderr=subprocess.STDOUT)
    base = f"http://127.0.0.1:{port}"
    try:
        wait_until(lambda: requests.get(base + "/healthz", timeout=1).ok, timeout_s=30,
                   message="antre api")
        yield base
    finally:
        process.terminate()
        process.wait(15)


def signed_in_session(base: str) -> requests.Session:
    session = requests.Session()
    form = session.get(base + "/ui/login", timeout=10).text
    csrf = re.search(r'name="csrf" value="([^"]+)"', form)
    assert csrf, "no sign-in form"
    answer = session.post(base + "/ui/login", data={"csrf": csrf.group(1), "token": TOKEN,
                                                    "next": "/ui/"}, timeout=10)
    assert answer.ok and "antre_session" in session.cookies, "sign-in failed"
    return session


def first_byte_ms(session: requests.Session, url: str) -> float:
    started = time.perf_counter()
    with session.get(url, stream=True, timeout=60) as answer:
        next(answer.iter_content(1))
        elapsed = (time.perf_counter() - started) * 1000
        answer.raise_for_status()
        for _ in answer.iter_content(65536):
            pass
    return elapsed


def median(samples: list[float]) -> float:
    return statistics.median(samples)


def measure_pages(base: str, client: redis.Redis, pages: dict[str, str],
                  runs: int) -> dict[str, dict[str, float]]:
    session = signed_in_session(base)
    results: dict[str, dict[str, float]] = {}
    for name, path in pages.items():
        # The first load reads every dead letter it groups; later ones only the new ones.
        before = commands(client)
        first_byte_ms(session, base + path)
        first_cost = commands(client) - before
        before = commands(client)
        session.get(base + path, timeout=60).raise_for_status()
        cost = commands(client) - before
        results[name] = {"ttfb_ms": median([first_byte_ms(session, base + path)
                                            for _ in range(runs)]),
                         "redis_commands_first": first_cost, "redis_commands": cost}
    render = full_render_ms(base, pages, runs)
    for name, value in render.items():
        results[name]["render_ms"] = value
    return results


def full_render_ms(base: str, pages: dict[str, str], runs: int) -> dict[str, float]:
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, headless=True,
                                             args=CHROMIUM_ARGS)
        page = browser.new_page()
        page.goto(base + "/ui/login")
        page.fill("#token", TOKEN)
        page.click("button[type=submit]")
        page.wait_for_url(base + "/ui/")
        results = {}
        for name, path in pages.items():
            samples = []
            for _ in range(runs + 1):
                page.goto(base + path, wait_until="load")
                samples.append(float(page.evaluate(
                    "() => { const [n] = performance.getEntriesByType('navigation');"
                    " return n.loadEventEnd - n.startTime; }")))
            results[name] = median(samples[1:])  # the first load fetches the static files
        browser.close()
    return results


def measure_live(base: str, client: redis.Redis, streams: str, count: int, ticks: int,
                 interval_s: float) -> float:
    """Redis commands per tick with ``count`` open streams of ``streams``."""
    session = signed_in_session(base)
    opened = [session.get(base + streams, stream=True, timeout=(5, None)) for _ in range(count)]
    try:
        time.sleep(interval_s * 1.5)  # the first ticks (and script loading) pass
        before, started = commands(client), time.monotonic()
        time.sleep(interval_s * ticks)
        spent = commands(client) - before
        elapsed_ticks = (time.monotonic() - started) / interval_s
    finally:
        for answer in opened:
            answer.close()
    return spent / elapsed_ticks


def table(rows: list[tuple[str, ...]]) -> str:
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    return "\n".join("  ".join(cell.rjust(w) if i else cell.ljust(w)
                               for i, (cell, w) in enumerate(zip(row, widths, strict=True)))
                     for row in rows)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--ready", type=int, default=1_000_000)
    parser.add_argument("--dead", type=int, default=100_000)
    parser.add_argument("--runs", type=int, default=5, help="samples per page (median)")
    parser.add_argument("--ticks", type=int, default=5, help="live ticks measured")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)

    with tempfile.TemporaryDirectory(prefix="antre-bench-dash-") as tmp:
        server = RedisServer("--maxmemory-policy", "noeviction")
        server.start()
        try:
            client = redis.Redis.from_url(server.url, decode_responses=True)
            build_state(client, ready=args.ready, dead=args.dead)
            some_job = client.lindex(Queue(client, QUEUE).keys.ready, -1)
            pages = {
                "overview": "/ui/",
                "queue, ready page 1": f"/ui/queues/{QUEUE}",
                "queue, ready page 10,000": f"/ui/queues/{QUEUE}?state=ready&page=10000",
                "queue, dead page 1,000": f"/ui/queues/{QUEUE}?state=dead&page=1000",
                "dead letters (500 grouped)": f"/ui/queues/{QUEUE}/dead",
                "dead letters (5,000 grouped)": f"/ui/queues/{QUEUE}/dead?scan=5000",
                "job": f"/ui/queues/{QUEUE}/jobs/{some_job}",
            }
            with running_api(server.url, Path(tmp)) as base:
                results = measure_pages(base, client, pages, args.runs)
                live = {}
                interval_s = 2.0
                for label, path in (("overview", "/ui/live/overview"),
                                    ("queue page", f"/ui/live/queues/{QUEUE}")):
                    for tabs in (1, 10):
                        live[f"{label}, {tabs} tab(s)"] = measure_live(
                            base, client, path, tabs, args.ticks, interval_s)
        finally:
            server.stop()

    rows = [("page", "first byte ms", "full render ms", "Redis commands (first load, next)")]
    rows += [(name, f"{r['ttfb_ms']:.1f}", f"{r['render_ms']:.1f}",
              f"{r['redis_commands_first']:,}, {r['redis_commands']:,}")
             for name, r in results.items()]
    print(table(rows))
    print()
    live_rows = [("live updates", "Redis commands per 2 s tick")]
    live_rows += [(name, f"{value:.1f}") for name, value in live.items()]
    print(table(live_rows))
    if args.json:
        print(json.dumps({"ready": args.ready, "dead": args.dead, "pages": results,
                          "live_per_tick": live}))
    return 0


if __name__ == "__main__":
    _results.run_and_keep(main, __file__)
