"""``antre dlq``: list, replay or purge dead-lettered jobs."""

from __future__ import annotations

import argparse
import sys
from typing import Final

from antre import errors
from antre.client import Queue
from antre.commands import EXIT_NOT_FOUND, Command, Unavailable, json_flag, open_queue, print_json
from antre.protocol import scripts
from antre.protocol.read_records import fields_op


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("action", choices=["list", "replay", "purge"],
                        help="list the newest dead jobs, or replay or purge some")
    parser.add_argument("job_ids", nargs="*", help="ids to replay or purge")
    parser.add_argument("--all", action="store_true",
                        help="replay or purge every job dead when the command starts (needed "
                             "when no ids are given); jobs that die meanwhile are left dead")
    parser.add_argument("--limit", type=int, default=100,
                        help="jobs listed (default %(default)s)")
    json_flag(parser)


def run(args: argparse.Namespace) -> int:
    if args.limit < 1:
        raise errors.InvalidArgument(f"--limit: got {args.limit}; must be >= 1")
    if args.action != "list" and bool(args.job_ids) == args.all:
        raise errors.InvalidArgument("give job ids, or --all for every dead job (not both)")
    queue = open_queue(args)
    if args.action == "list":
        jobs = queue.dead_letters(limit=args.limit)
        if args.json:
            print_json([job.to_dict() for job in jobs])
        else:
            for job in jobs:
                print(f"{job.id}  {job.type:<20} attempts={job.attempt}  {job.last_error or ''}")
            print(f"{len(jobs)} dead job(s) shown", file=sys.stderr)
        return 0
    verb = "replayed" if args.action == "replay" else "purged"
    if args.all:
        print(f"{verb} {_all(queue, args.action)} job(s)")
        return 0
    ids = list(dict.fromkeys(args.job_ids))
    scripts.check_job_ids("job ids", ids)
    if args.action == "replay":
        done = set(queue.replay(ids, limit=len(ids)))
    else:
        done = _dead_among(queue, ids)
        queue.purge(sorted(done), limit=len(ids))
    print(f"{verb} {len(done)} job(s)")
    missing = [job_id for job_id in ids if job_id not in done]
    if missing:
        raise Unavailable(f"not in the dead-letter list (unknown, expired, or not dead): "
                          f"{', '.join(missing)}", exit_code=EXIT_NOT_FOUND)
    return 0


def _dead_among(queue: Queue, ids: list[str]) -> set[str]:
    statuses = [values[0] for chunk in scripts.chunked(ids)
                for values in scripts.run(queue.redis, fields_op(queue.settings, chunk, ["status"]))]
    return {job_id for job_id, status in zip(ids, statuses, strict=True) if status == "dead"}


#: The limit of a replay or purge of every dead job: what bounds it is the cutoff the client's
#: first script call takes (the jobs dead then), not a count.
_EVERY: Final = 2**63 - 1


def _all(queue: Queue, action: str) -> int:
    """Replays or purges the jobs dead when it starts, in one call of the client, which goes in
    script calls that each hold Redis briefly and take only letters at or below the first
    call's cutoff. A job that dies meanwhile, for the first time or again after a replay, is
    left dead: not replayed twice, not deleted unseen. One call, not several (each would take
    a cutoff of its own), and no count read first: a count read before the first call let the
    purge take a job that died between the two in place of one another client took."""
    if action == "replay":
        return len(queue.replay(limit=_EVERY))
    return queue.purge(limit=_EVERY)


COMMAND: Final = Command("dlq", "dead-letter list, replay, purge", configure, run)
