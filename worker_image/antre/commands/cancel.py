"""``antre cancel``: withdraw a job that is not running."""

from __future__ import annotations

import argparse
from typing import Final

from antre import errors
from antre.commands import Command, open_queue


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("job_id", help="the job to cancel")


def run(args: argparse.Namespace) -> int:
    try:
        previous = open_queue(args).cancel(args.job_id)
    except errors.JobNotFound:
        raise errors.JobNotFound(f"job {args.job_id}: no such job (never existed, or its record "
                                 "expired)") from None
    if previous in ("done", "cancelled"):
        print(f"job {args.job_id}: already {previous}; nothing to cancel")
    else:
        print(f"job {args.job_id}: was {previous}, now cancelled")
    return 0


COMMAND: Final = Command("cancel", "withdraw a job that is not running", configure, run)
