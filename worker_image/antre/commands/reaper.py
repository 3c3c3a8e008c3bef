"""``antre reaper``: requeue expired leases and promote due retries, once or in a loop."""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from typing import Final

import redis

from antre import connection, errors, limits, reaper
from antre.commands import Command, open_queue


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--once", action="store_true",
                        help="one pass, print what it did, exit (what the CronJob runs)")
    parser.add_argument("--interval", type=float, default=5.0,
                        help="without --once: seconds between passes; only passes that did "
                             "something are printed, and an outage is waited out (one line "
                             "when Redis goes away, one when it is back) (default %(default)s)")


def run(args: argparse.Namespace) -> int:
    if not (math.isfinite(args.interval) and 0 < args.interval <= limits.MAX_WAIT_S):
        raise errors.InvalidArgument(f"--interval: got {args.interval:g}; must be a number of "
                                     f"seconds > 0 and <= {limits.MAX_WAIT_S}")
    queue = open_queue(args)
    if args.once:
        _print_pass(queue.name, reaper.run_once(queue.redis, queue.settings))
        return 0
    failing = False
    while True:
        # A loop rides out an outage as a worker does: a pass is one atomic script call, so a
        # failed one changed nothing and the next simply tries again. One line when Redis goes
        # away and one when it is back, not one per pass.
        try:
            totals = reaper.run_once(queue.redis, queue.settings)
        except (errors.RedisUnavailable, redis.ConnectionError, redis.TimeoutError) as exc:
            if not failing:
                print(f"antre reaper: {connection.describe_failure(args.redis_url or '', exc)}"
                      f"; trying again every {args.interval:g} s", file=sys.stderr, flush=True)
            failing = True
        else:
            if failing:
                print("antre reaper: Redis answers again; passes resumed", file=sys.stderr,
                      flush=True)
            failing = False
            if totals.requeued or totals.dead or totals.promoted or totals.workers_dropped:
                _print_pass(queue.name, totals)
        time.sleep(args.interval)


def _print_pass(queue: str, totals: reaper.ReapTotals) -> None:
    print(json.dumps({"queue": queue, "requeued": totals.requeued, "dead": totals.dead,
                      "promoted": totals.promoted, "workers_dropped": totals.workers_dropped,
                      "calls": totals.passes}), flush=True)


COMMAND: Final = Command("reaper", "requeue expired leases and promote due retries", configure, run)
