"""``antre expand-queued``: turn every queued field of a queue into its job's Hash, the form
workers of every version claim, before its workers are rolled back to an earlier version
(PROTOCOL.md "Versions")."""

from __future__ import annotations

import argparse
from typing import Final

from antre.commands import Command, Unavailable, open_queue
from antre.protocol import scripts
from antre.protocol.expand_queued import expand_queued_op


def configure(parser: argparse.ArgumentParser) -> None:
    """No options of its own: the queue and Redis options say which queue."""


def run(args: argparse.Namespace) -> int:
    queue = open_queue(args)
    total = 0
    while True:
        # A call of at most MAX_JOBS_PER_CALL fields, so Redis is never held for long.
        result = scripts.run(queue.redis, expand_queued_op(queue.settings))
        total += result.expanded
        if result.expanded == 0 or result.left == 0:
            break
    print(f"expanded {total} queued job(s) into Hashes; {result.left} left")
    if result.field_readers:
        raise Unavailable(
            f"{result.field_readers} worker(s) of this version are registered on queue "
            f"{queue.name!r}: enqueues keep writing queued fields while any is; stop them, "
            "then run this again before starting workers of an earlier version")
    if result.left:
        raise Unavailable(
            f"{result.left} queued field(s) name a job whose key exists already and were left "
            f"as they are: see `antre job <id>` for the ids in HKEYS {queue.keys.queued}")
    return 0


COMMAND: Final = Command("expand-queued", "turn queued jobs back into job Hashes before rolling "
                         "workers back to an earlier version", configure, run)
