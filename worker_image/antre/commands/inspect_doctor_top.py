"""``antre inspect``, ``antre doctor`` and ``antre top``: the debugging checklist on screen.

:func:`antre.snapshots.read_snapshot` reads the queue; :mod:`antre.findings` decides and renders.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from typing import TYPE_CHECKING, Final

from antre import errors
from antre.commands import Command, json_flag, open_queue

if TYPE_CHECKING:
    from antre.findings import Thresholds
    from antre.protocol.depth import Depth

# findings and snapshots are imported by the functions that use them: the command line imports
# every command module, and a worker starting should not pay for the diagnosis.

#: The thresholds' flags: (flag, field of Thresholds, help).
THRESHOLD_FLAGS: Final = (
    ("--overdue-after", "overdue_after_s", "a retry due longer than this many seconds is overdue"),
    ("--stuck-lease", "stuck_lease_s", "a lease expired longer than this many seconds is stuck"),
    ("--max-ready-age", "max_ready_age_s", "warn when the next ready job waited longer, seconds"),
    ("--stale-heartbeat", "stale_heartbeat_s",
     "warn when a worker's last heartbeat is older, seconds"),
    ("--max-replica-lag", "max_replica_lag_s",
     "warn when a replica last acknowledged the primary longer ago, seconds"),
)


def _thresholds(args: argparse.Namespace) -> Thresholds:
    from antre.findings import Thresholds
    values = {}
    for flag, name, _help in THRESHOLD_FLAGS:
        value = getattr(args, name)
        if not 0 <= value < math.inf:  # NaN and inf too: NaN compares false, inf overflows
            raise errors.InvalidArgument(f"{flag}: got {value}; must be a finite number >= 0 "
                                         "seconds")
        values[name] = value
    return Thresholds(**values)


def _common(parser: argparse.ArgumentParser) -> None:
    from antre.findings import Thresholds
    parser.add_argument("--sample-gap", type=float, default=1.0,
                        help="seconds between the two depth samples of the trend; 0: one sample "
                             "(default %(default)s)")
    defaults = Thresholds()
    for flag, name, text in THRESHOLD_FLAGS:
        parser.add_argument(flag, dest=name, type=float, default=getattr(defaults, name),
                            help=f"{text} (default %(default)s)")
    parser.add_argument("--rows", type=int, default=5,
                        help="lines per section (default %(default)s)")


def configure_inspect(parser: argparse.ArgumentParser) -> None:
    _common(parser)
    json_flag(parser)


def _check_gap(value: float, flag: str) -> None:
    if not 0 <= value < math.inf:
        raise errors.InvalidArgument(f"{flag}: got {value}; must be a finite number >= 0 seconds")


def run_inspect(args: argparse.Namespace) -> int:
    from antre import findings, snapshots
    from antre.protocol import scripts
    _check_gap(args.sample_gap, "--sample-gap")
    scripts.check_limit("--rows", args.rows)
    thresholds = _thresholds(args)
    snapshot = snapshots.read_snapshot(open_queue(args), sample_gap_s=args.sample_gap,
                             thresholds=thresholds)
    if args.json:
        print(json.dumps(findings.to_dict(snapshot, findings.diagnose(snapshot, thresholds),
                                            thresholds=thresholds), indent=2, default=str))
    else:
        print(findings.render(snapshot, thresholds=thresholds, rows=args.rows))
    return 0


def configure_doctor(parser: argparse.ArgumentParser) -> None:
    _common(parser)
    parser.add_argument("--fail-on", choices=["warning", "critical"], default="warning",
                        help="lowest severity that makes the exit status non-zero "
                             "(default %(default)s)")
    json_flag(parser)


def run_doctor(args: argparse.Namespace) -> int:
    from antre import findings, snapshots
    _check_gap(args.sample_gap, "--sample-gap")
    thresholds = _thresholds(args)
    snapshot = snapshots.read_snapshot(open_queue(args), sample_gap_s=args.sample_gap,
                             thresholds=thresholds)
    found = findings.diagnose(snapshot, thresholds)
    if args.json:
        print(json.dumps([finding.to_dict() for finding in found], indent=2))
    elif not found:
        print(f"queue {snapshot.queue}: no findings, all clear")
    else:
        for finding in found:
            print(f"{str(finding.severity).upper():<8} {finding.code}: {finding.summary}")
            print(f"         -> {finding.action}")
    return findings.exit_code(found, fail_on=findings.Severity[args.fail_on.upper()])


def configure_top(parser: argparse.ArgumentParser) -> None:
    _common(parser)
    parser.add_argument("--interval", type=float, default=2.0,
                        help="seconds between refreshes (default %(default)s)")
    parser.add_argument("--iterations", type=int, default=0,
                        help="stop after this many screens; 0: until Ctrl-C (default %(default)s)")


def run_top(args: argparse.Namespace) -> int:
    from antre import findings, snapshots
    from antre.protocol import scripts
    _check_gap(args.sample_gap, "--sample-gap")
    scripts.check_limit("--rows", args.rows)
    _check_gap(args.interval, "--interval")
    if args.iterations < 0:
        raise errors.InvalidArgument(f"--iterations: got {args.iterations}; must be >= 0")
    thresholds = _thresholds(args)
    queue = open_queue(args)
    interactive = sys.stdout.isatty()
    before: Depth | None = None
    known_dead = snapshots.DeadCache()  # each refresh reads only the dead letters it has not seen
    shown = 0
    while True:
        # The first screen compares two samples --sample-gap apart; later ones compare with the
        # previous screen, so the trend covers one refresh interval.
        snapshot = snapshots.read_snapshot(queue, sample_gap_s=args.sample_gap, thresholds=thresholds,
                                 before=before, known_dead=known_dead)
        screen = findings.render(snapshot, findings.diagnose(snapshot, thresholds),
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


INSPECT: Final = Command("inspect", "one screen: depth and trend, expired leases, overdue retries, "
                         "dead jobs by error, resource locks, workers", configure_inspect,
                         run_inspect)
DOCTOR: Final = Command("doctor", "findings with suggested actions; exits 1 on warnings, 2 on "
                        "critical findings", configure_doctor, run_doctor)
TOP: Final = Command("top", "live view of inspect and doctor, refreshed every --interval seconds",
                     configure_top, run_top)
