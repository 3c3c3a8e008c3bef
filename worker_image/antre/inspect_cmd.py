"""``antre inspect``, ``antre doctor`` and ``antre top``: the read side of the debugging checklist.

:func:`read_snapshot` is the only code here that talks to Redis (read-only commands: the depth
script twice, ZRANGEBYSCORE on the processing and retry sets, LRANGE on the dead list, SCAN over
the lock prefix, the worker registry); :mod:`antre.inspection` turns the snapshot into findings
and text. Key names come from :class:`antre.keys.QueueKeys` through the queue.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from collections.abc import Callable
from typing import Any, Final

import redis

from antre import cli, errors, inspection
from antre.client import Queue
from antre.inspection import Severity, Snapshot, Thresholds
from antre.protocol.depth import Depth
from antre.protocol.workers import WorkerEntry

#: Entries read per section: enough for one screen and for grouping, bounded for big queues.
READ_LIMIT: Final = 50
DEAD_READ_LIMIT: Final = 500
LOCK_SCAN_LIMIT: Final = 1000
#: Shown as the holder of a key under the lock prefix that is not a string (not antre's).
NOT_A_LOCK: Final = "(not a lock: wrong key type)"


def read_snapshot(queue: Queue, *, sample_gap_s: float = 1.0, thresholds: Thresholds | None = None,
                  before: Depth | None = None, sleep: Callable[[float], None] = time.sleep) -> Snapshot:
    """Reads the queue's state. The trend compares ``before`` (or a first reading taken
    ``sample_gap_s`` earlier) with the current depth."""
    thresholds = thresholds or Thresholds()
    if before is None:
        before = queue.stats()
        if sample_gap_s > 0:
            sleep(sample_gap_s)
    after = queue.stats()
    redis_client, k, now = queue.redis, queue.keys, after.now_ms

    expired = redis_client.zrangebyscore(k.processing, "-inf", now, start=0, num=READ_LIMIT,
                                         withscores=True)
    overdue_cutoff = now - int(thresholds.overdue_after_s * 1000)
    overdue_total = int(redis_client.zcount(k.retry, "-inf", overdue_cutoff))
    overdue = redis_client.zrangebyscore(k.retry, "-inf", overdue_cutoff, start=0, num=READ_LIMIT,
                                         withscores=True) if overdue_total else []
    dead_ids = redis_client.lrange(k.dead, 0, DEAD_READ_LIMIT - 1)
    lock_keys = []
    for key in redis_client.scan_iter(match=k.lock_prefix + "*", count=1000):
        lock_keys.append(key)
        if len(lock_keys) >= LOCK_SCAN_LIMIT:
            break

    pipe = redis_client.pipeline(transaction=False)
    # raise_on_error=False: a key of the wrong type under the lock prefix is reported, not fatal.
    for job_id, _deadline in expired:
        pipe.hmget(k.job(job_id), "type", "worker", "attempt")
    for job_id, _due in overdue:
        pipe.hmget(k.job(job_id), "type", "attempt", "last_error")
    for job_id in dead_ids:
        pipe.hmget(k.job(job_id), "type", "last_error", "died_at")
    for key in lock_keys:
        pipe.get(key)
        pipe.pttl(key)
    replies = iter(pipe.execute(raise_on_error=False))

    leases = []
    for job_id, deadline in expired:
        job_type, worker, attempt = next(replies)
        leases.append(inspection.ExpiredLease(
            job_id=job_id, job_type=job_type or "?", worker=worker or "",
            attempt=_int(attempt), expired_for_s=max(now - deadline, 0) / 1000))
    retries = []
    for job_id, due in overdue:
        job_type, attempt, last_error = next(replies)
        retries.append(inspection.OverdueRetry(
            job_id=job_id, job_type=job_type or "?", attempt=_int(attempt),
            overdue_s=max(now - due, 0) / 1000, last_error=last_error or ""))
    dead = []
    for job_id in dead_ids:
        job_type, last_error, died_at = next(replies)
        dead.append(inspection.DeadJob(job_id=job_id, job_type=job_type or "?",
                                       last_error=last_error or "", died_at_ms=_int(died_at)))
    holders: list[tuple[str, str, float | None]] = []
    for key in lock_keys:
        value, pttl = next(replies), _int(next(replies), -2)
        if value is None or pttl == -2:  # expired between SCAN and GET
            continue
        holder = NOT_A_LOCK if isinstance(value, Exception) else str(value).split(":", 1)[0]
        holders.append((key[len(k.lock_prefix):], holder, None if pttl < 0 else pttl / 1000))
    processing = []
    if holders:
        pipe = redis_client.pipeline(transaction=False)
        for _resource, job_id, _ttl in holders:
            pipe.zscore(k.processing, job_id)
        processing = pipe.execute()
    locks = [inspection.ResourceLock(resource=resource, job_id=job_id, ttl_s=ttl,
                                     holder_processing=score is not None)
             for (resource, job_id, ttl), score in zip(holders, processing, strict=True)]

    workers, bad_workers = _read_workers(queue, now)
    try:
        warning = queue.eviction_policy_warning()
    except redis.ResponseError:  # INFO may be renamed or disabled on managed Redis
        warning = None
    return Snapshot(queue=queue.name, before=before, after=after, expired_leases=leases,
                    overdue_retries=retries, overdue_total=overdue_total, dead_jobs=dead,
                    locks=sorted(locks, key=lambda lock: lock.resource),
                    workers=sorted(workers, key=lambda w: w.worker_id),
                    bad_worker_entries=bad_workers, eviction_warning=warning)


def _int(value: Any, default: int = 0) -> int:
    """A number from a hash field; ``default`` for a missing or unreadable one (the tools read
    whatever is in Redis and must not fail on one odd field)."""
    try:
        return int(float(value))
    except (TypeError, ValueError, OverflowError):
        return default


def _read_workers(queue: Queue, now_ms: int) -> tuple[list[WorkerEntry], list[str]]:
    """The live workers, and the ids of registry entries that cannot be read."""
    registry = queue.worker_registry()
    return registry.entries, registry.unreadable


# -- commands --------------------------------------------------------------------------------------

def _thresholds(args: argparse.Namespace) -> Thresholds:
    values = {name: getattr(args, name) for name in ("overdue_after_s", "stuck_lease_s",
                                                     "max_ready_age_s", "stale_heartbeat_s")}
    for name, value in values.items():
        if not 0 <= value < math.inf:  # NaN and inf too: NaN compares false, inf overflows
            raise errors.InvalidArgument(f"--{name[:-2].replace('_', '-')}: got {value}; "
                                         "must be a finite number >= 0 seconds")
    return Thresholds(**values)


def _common(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--sample-gap", type=float, default=1.0,
                        help="seconds between the two depth samples of the trend (0: one sample)")
    parser.add_argument("--overdue-after", dest="overdue_after_s", type=float, default=30.0,
                        help="a retry due longer than this is overdue (seconds)")
    parser.add_argument("--stuck-lease", dest="stuck_lease_s", type=float, default=30.0,
                        help="a lease expired longer than this is stuck (seconds)")
    parser.add_argument("--max-ready-age", dest="max_ready_age_s", type=float, default=300.0,
                        help="warn when the next ready job waited longer (seconds)")
    parser.add_argument("--stale-heartbeat", dest="stale_heartbeat_s", type=float, default=30.0,
                        help="warn when a worker's last heartbeat is older (seconds)")
    parser.add_argument("--rows", type=int, default=5, help="lines per section")


def _inspect_args(parser: argparse.ArgumentParser) -> None:
    _common(parser)
    parser.add_argument("--json", action="store_true", help="machine-readable output")


def _check_gap(value: float, flag: str) -> None:
    if not 0 <= value < math.inf:
        raise errors.InvalidArgument(f"{flag}: got {value}; must be a finite number >= 0 seconds")


@cli.register("inspect", "one screen: depth and trend, expired leases, overdue retries, dead "
              "jobs by error, resource locks, workers")(_inspect_args)
def run_inspect(args: argparse.Namespace) -> int:
    _check_gap(args.sample_gap, "--sample-gap")
    thresholds = _thresholds(args)
    snapshot = read_snapshot(cli.open_queue(args), sample_gap_s=args.sample_gap,
                             thresholds=thresholds)
    if args.json:
        print(json.dumps(inspection.to_dict(snapshot, inspection.diagnose(snapshot, thresholds),
                                            thresholds=thresholds), indent=2, default=str))
    else:
        print(inspection.render(snapshot, thresholds=thresholds, rows=args.rows))
    return 0


def _doctor_args(parser: argparse.ArgumentParser) -> None:
    _common(parser)
    parser.add_argument("--fail-on", choices=["warning", "critical"], default="warning",
                        help="lowest severity that makes the exit status non-zero")
    parser.add_argument("--json", action="store_true", help="machine-readable output")


@cli.register("doctor", "findings with suggested actions; exits 1 on warnings, 2 on critical "
              "findings")(_doctor_args)
def run_doctor(args: argparse.Namespace) -> int:
    _check_gap(args.sample_gap, "--sample-gap")
    thresholds = _thresholds(args)
    snapshot = read_snapshot(cli.open_queue(args), sample_gap_s=args.sample_gap,
                             thresholds=thresholds)
    findings = inspection.diagnose(snapshot, thresholds)
    if args.json:
        print(json.dumps([finding.to_dict() for finding in findings], indent=2))
    elif not findings:
        print(f"queue {snapshot.queue}: no findings, all clear")
    else:
        for finding in findings:
            print(f"{str(finding.severity).upper():<8} {finding.code}: {finding.summary}")
            print(f"         -> {finding.action}")
    return inspection.exit_code(findings, fail_on=Severity[args.fail_on.upper()])


def _top_args(parser: argparse.ArgumentParser) -> None:
    _common(parser)
    parser.add_argument("--interval", type=float, default=2.0, help="seconds between refreshes")
    parser.add_argument("--iterations", type=int, default=0,
                        help="stop after this many screens (0: until Ctrl-C)")


@cli.register("top", "live view of inspect and doctor, refreshed every --interval seconds")(_top_args)
def run_top(args: argparse.Namespace) -> int:
    _check_gap(args.sample_gap, "--sample-gap")
    _check_gap(args.interval, "--interval")
    if args.iterations < 0:
        raise errors.InvalidArgument(f"--iterations: got {args.iterations}; must be >= 0")
    thresholds = _thresholds(args)
    queue = cli.open_queue(args)
    interactive = sys.stdout.isatty()
    before: Depth | None = None
    shown = 0
    while True:
        # The first screen compares two samples --sample-gap apart; later ones compare with the
        # previous screen, so the trend covers one refresh interval.
        snapshot = read_snapshot(queue, sample_gap_s=args.sample_gap, thresholds=thresholds,
                                 before=before)
        screen = inspection.render(snapshot, inspection.diagnose(snapshot, thresholds),
                                   thresholds=thresholds, rows=args.rows)
        if interactive:
            sys.stdout.write("\x1b[H\x1b[2J")  # home + clear: redraw in place
        print(screen, flush=True)
        if not interactive:
            print("-" * 40, flush=True)
        shown += 1
        if args.iterations and shown >= args.iterations:
            return 0
        before = snapshot.after
        time.sleep(args.interval)


def describe(snapshot: Snapshot) -> dict[str, Any]:
    """The JSON of ``antre inspect --json`` with default thresholds (for callers in Python)."""
    return inspection.to_dict(snapshot, inspection.diagnose(snapshot))
