"""``antre stats``: the queue's counts by state, and its lifetime event counters."""

from __future__ import annotations

import argparse
import sys
from typing import Final

import redis

from antre.commands import Command, json_flag, open_queue, print_json


def run(args: argparse.Namespace) -> int:
    queue = open_queue(args)
    depth = queue.stats()
    try:
        warning = queue.eviction_policy_warning()
    except redis.ResponseError:  # INFO denied by an ACL or renamed on managed Redis
        warning = None
    data = {
        "queue": queue.name, "ready": depth.ready, "processing": depth.processing,
        "expired_leases": depth.expired_leases, "retry": depth.scheduled, "retry_due": depth.due,
        "dead": depth.dead, "done": depth.counters.get("done", 0), "workers": depth.workers,
        "oldest_ready_age_s": depth.oldest_ready_age_s, "counters": depth.counters,
    }
    if warning:
        print(f"WARNING: {warning}", file=sys.stderr)
    if args.json:
        print_json(data)
    else:
        for key in ("queue", "ready", "processing", "expired_leases", "retry", "retry_due", "dead",
                    "done", "workers", "oldest_ready_age_s"):
            print(f"{key:>20}: {data[key] if data[key] is not None else '-'}")
        # Lifetime counts of each event (retried, released, handed_back, lease_expired...).
        events = "  ".join(f"{name}={count}" for name, count in sorted(depth.counters.items()))
        print(f"{'events':>20}: {events or '-'}")
    return 0


COMMAND: Final = Command("stats", "queue counts: ready, processing, retry, dead, done; event counters",
                         json_flag,
                         run)
