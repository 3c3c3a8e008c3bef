"""The ``antre`` command line: the parser built from the commands, and errors as exit codes.

Each command lives in its own module under :mod:`antre.commands`; this module lists them and is
the only one that knows them all. User errors (bad arguments, Redis unreachable, unknown job, a
port in use) print one line to stderr and exit non-zero; no tracebacks.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
from collections.abc import Sequence
from typing import Final

import redis

from antre import connection, errors
from antre.commands import (
    EXIT_NOT_FOUND,
    EXIT_UNAVAILABLE,
    EXIT_USAGE,
    Command,
    Unavailable,
    api,
    cancel,
    check_redis_args,
    demo,
    dlq,
    enqueue,
    inspect_doctor_top,
    job,
    reaper,
    redis_args,
    stats,
    worker,
)

#: In the order ``antre --help`` lists them.
COMMANDS: Final[tuple[Command, ...]] = (
    worker.COMMAND, reaper.COMMAND, enqueue.COMMAND, stats.COMMAND, job.COMMAND, dlq.COMMAND,
    cancel.COMMAND, api.COMMAND, inspect_doctor_top.INSPECT, inspect_doctor_top.DOCTOR,
    inspect_doctor_top.TOP, demo.COMMAND,
)


def build_parser(argv: Sequence[str] | None = None) -> argparse.ArgumentParser:
    """The full parser; given the command line, only the command it names gets its options
    (some import what only that command uses, such as the HTTP server for ``api``)."""
    chosen = _command_named(argv) if argv is not None else None
    parser = argparse.ArgumentParser(prog="antre", description="antre: a reliable Redis job queue")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for command in COMMANDS:
        command_parser = sub.add_parser(command.name, help=command.help, description=command.help)
        if argv is None or command.name == chosen:
            if command.redis_args:
                redis_args(command_parser)
            command.configure(command_parser)
    return parser


def _command_named(argv: Sequence[str]) -> str | None:
    """The sub-command: the first argument that is not an option (the top level has no options
    that take a value)."""
    return next((arg for arg in argv if not arg.startswith("-")), None)


def main(argv: Sequence[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    try:
        parser = build_parser(argv)
    except errors.InvalidArgument as exc:  # a bad ANTRE_* default, e.g. ANTRE_REDIS_TLS=maybe
        print(f"antre: {exc}", file=sys.stderr)
        return EXIT_USAGE
    args = parser.parse_args(argv)
    command = next(c for c in COMMANDS if c.name == args.command)
    prefix = f"antre {command.name}:"
    try:
        if command.redis_args:
            check_redis_args(args)
        return command.run(args)
    except Unavailable as exc:
        print(prefix, exc, file=sys.stderr)
        return exc.exit_code
    except errors.JobNotFound as exc:
        print(prefix, exc, file=sys.stderr)
        return EXIT_NOT_FOUND
    except errors.RedisRefused as exc:
        print(prefix, exc, file=sys.stderr)
        return EXIT_UNAVAILABLE
    except (errors.RedisUnavailable, redis.ConnectionError, redis.TimeoutError) as exc:
        print(prefix, connection.describe_unreachable(getattr(args, "redis_url", None) or "", exc),
              file=sys.stderr)
        return EXIT_UNAVAILABLE
    except redis.exceptions.RedisClusterException as exc:
        print(prefix, connection.describe_cluster_error(getattr(args, "redis_url", None) or "", exc),
              file=sys.stderr)
        return EXIT_UNAVAILABLE
    except (errors.ProtocolError, redis.ResponseError) as exc:  # OOM, NOPERM, READONLY...
        print(prefix, f"Redis refused the command: {exc}", file=sys.stderr)
        return EXIT_UNAVAILABLE
    except errors.AntreError as exc:
        print(prefix, exc, file=sys.stderr)
        return EXIT_USAGE
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:  # `antre job ID | head`: the reader left; that is not an error
        with contextlib.suppress(OSError):
            sys.stdout = open(os.devnull, "w")  # noqa: SIM115 - replaces the closed stdout
        return 0


if __name__ == "__main__":
    sys.exit(main())
