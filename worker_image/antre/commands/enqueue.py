"""``antre enqueue``: add one job and print its id."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Final

from antre import errors
from antre.commands import Command, open_queue


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("type", help="job type (the handler name)")
    parser.add_argument("payload", help="JSON payload, e.g. '{\"to\": \"a@b.c\"}', or - to "
                                        "read it from standard input as UTF-8 (for payloads "
                                        "longer than a command line takes, about 128 KiB)")
    parser.add_argument("--idempotency-key",
                        help="while live, enqueues with the same key return the existing job "
                             "(default: none)")
    parser.add_argument("--resource-key",
                        help="jobs with the same resource key never run at once (default: none)")
    parser.add_argument("--max-attempts", type=int,
                        help="runs before the job is dead-lettered (default: the queue's, env "
                             "ANTRE_MAX_ATTEMPTS, else 5)")
    parser.add_argument("--delay", type=float, default=0.0,
                        help="seconds before it may run (default %(default)s)")


def _read_stdin() -> str:
    """Standard input as UTF-8, whatever the locale: JSON is UTF-8 text, and a text stdin
    decodes by the locale (strictly in most UTF-8 locales: a traceback for a stray byte)."""
    raw = sys.stdin.buffer.read()
    try:
        return raw.decode()
    except UnicodeDecodeError as exc:
        raise errors.InvalidArgument(
            f"payload: standard input is not UTF-8 text (byte 0x{raw[exc.start]:02x} at "
            f"position {exc.start}); JSON must be UTF-8") from None


def run(args: argparse.Namespace) -> int:
    text = _read_stdin() if args.payload == "-" else args.payload
    try:
        payload = json.loads(text)
    except (ValueError, RecursionError) as exc:
        raise errors.InvalidArgument(
            f"payload: not valid JSON ({exc}): {text!r:.200}") from None
    result = open_queue(args).enqueue(
        args.type, payload, idempotency_key=args.idempotency_key, resource_key=args.resource_key,
        max_attempts=args.max_attempts, delay=args.delay)
    print(result.job_id)
    if not result.created:
        print(f"idempotency key {args.idempotency_key!r} already used: job {result.job_id} "
              "returned, nothing new enqueued", file=sys.stderr)
    return 0


COMMAND: Final = Command("enqueue", "add a job; prints its id", configure, run)
