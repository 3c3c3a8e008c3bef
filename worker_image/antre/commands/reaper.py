"""``antre reaper``: requeue expired leases and promote due retries, once or in a loop."""

from __future__ import annotations

import argparse
import json
import math
import time
from typing import Final

from antre import errors, limits, reaper
from antre.commands import Command, open_queue


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--once", action="store_true",
                        help="one pass, print what it did, exit (what the CronJob runs)")
    parser.add_argument("--interval", type=float, default=5.0,
                        help="without --once: seconds between passes; only passes that did "
                             "something are printed (default %(default)s)")


def run(args: argparse.Namespace) -> int:
    if not (math.isfinite(args.interval) and 0 < args.interval <= limits.MAX_WAIT_S):
        raise errors.InvalidArgument(f"--interval: got {args.interval:g}; must be a number of "
                                     f"seconds > 0 and <= {limits.MAX_WAIT_S}")
    queue = open_queue(args)
    while True:
        totals = reaper.run_once(queue.redis, queue.settings)
        if args.once or totals.requeued or totals.dead or totals.promoted or totals.workers_dropped:
            print(json.dumps({"queue": queue.name, "requeued": totals.requeued, "dead": totals.dead,
                              "promoted": totals.promoted, "workers_dropped": totals.workers_dropped,
                              "calls": totals.passes}), flush=True)
        if args.once:
            return 0
        time.sleep(args.interval)


COMMAND: Final = Command("reaper", "requeue expired leases and promote due retries", configure, run)
