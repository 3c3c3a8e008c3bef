"""``antre expand-queued``: turn every queued field of a queue into its job's Hash, the form
workers of every version claim, before its workers are rolled back to an earlier version
(PROTOCOL.md "Versions")."""

from __future__ import annotations

import argparse
from typing import Final

from antre.commands import EXIT_CONFLICT, Command, Unavailable, open_queue
from antre.protocol import scripts
from antre.protocol.expand_queued import expand_queued_op


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--requeue", action="store_true",
        help="also push each expanded job that is not delayed to the head of the ready list: "
             "recovers jobs whose id a worker of an earlier version already popped and dropped "
             "(an id in the list twice is still claimed once)")


def run(args: argparse.Namespace) -> int:
    queue = open_queue(args)
    expanded, cursor = 0, "0"
    clashing: list[str] = []
    while True:
        # One call scans about MAX_JOBS_PER_CALL fields, so Redis is never held for long.
        step = scripts.run(queue.redis, expand_queued_op(queue.settings, cursor,
                                                         requeue=args.requeue))
        if step.field_readers:
            raise Unavailable(
                f"{step.field_readers} worker(s) of this version are registered on queue "
                f"{queue.name!r}, and enqueues write compact jobs while any is: stop them (a "
                "killed one leaves the registry when its entry expires and `antre reaper "
                "--once` runs), then run this again; nothing was changed by this call")
        expanded += step.expanded
        clashing.extend(step.clashing)
        cursor = step.cursor
        if cursor == "0":
            break
    print(f"expanded {expanded} queued job(s) into Hashes; {step.left} left")
    if clashing:
        shown = ", ".join(clashing[:3]) + (" ..." if len(clashing) > 3 else "")
        raise Unavailable(
            f"{len(clashing)} queued field(s) name a job whose key exists already and were left "
            f"as they are ({shown}): compare them with `antre job <id>`",
            exit_code=EXIT_CONFLICT)
    return 0


COMMAND: Final = Command("expand-queued", "turn queued jobs back into job Hashes before rolling "
                         "workers back to an earlier version", configure, run)
