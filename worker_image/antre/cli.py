"""The ``antre`` command line: the parser built from the commands, and errors as exit codes.

Each command lives in its own module under :mod:`antre.commands`; this module lists them and is
the only one that knows them all. A command line naming one command imports that command's
module only (a worker's start pays for no other command); ``antre --help`` imports them all.
User errors (bad arguments, Redis unreachable, unknown job, a
port in use) print one line to stderr and exit non-zero; no tracebacks.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import os
import sys
from collections.abc import Sequence
from typing import Final

import redis

from antre import connection, errors
from antre.commands import (
    EXIT_CONFLICT,
    EXIT_NOT_FOUND,
    EXIT_UNAVAILABLE,
    EXIT_USAGE,
    Command,
    Unavailable,
    check_redis_args,
    redis_args,
)

#: Every command, in the order ``antre --help`` lists them, and its module in antre.commands.
MODULES: Final = (
    ("worker", "worker"), ("reaper", "reaper"), ("enqueue", "enqueue"), ("stats", "stats"),
    ("job", "job"), ("dlq", "dlq"), ("cancel", "cancel"), ("api", "api"),
    ("inspect", "inspect_doctor_top"), ("doctor", "inspect_doctor_top"),
    ("top", "inspect_doctor_top"), ("expand-queued", "expand_queued"), ("demo", "demo"),
)


def load_command(name: str) -> Command:
    """The :class:`Command` called ``name``, from its module (imported now)."""
    module = importlib.import_module(f"antre.commands.{dict(MODULES)[name]}")
    return next(value for value in vars(module).values()
                if isinstance(value, Command) and value.name == name)


def build_parser(argv: Sequence[str] | None = None) -> argparse.ArgumentParser:
    """The full parser; given a command line naming a command, only that command is imported
    and gets its options (some import what only that command uses, such as the HTTP server for
    ``api``); the others are listed by name."""
    chosen = _command_named(argv) if argv is not None else None
    known = chosen in dict(MODULES)
    parser = argparse.ArgumentParser(prog="antre", description="antre: a reliable Redis job queue")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name, _ in MODULES:
        if known and name != chosen:
            sub.add_parser(name)
            continue
        command = load_command(name)
        command_parser = sub.add_parser(name, help=command.help, description=command.help)
        if argv is None or name == chosen:
            if command.redis_args:
                redis_args(command_parser)
            command.configure(command_parser)
    return parser


def _command_named(argv: Sequence[str]) -> str | None:
    """The sub-command: the first argument that is not an option (the top level has no options
    that take a value); None when the top level's --help comes first (it lists them all)."""
    for arg in argv:
        if arg in ("-h", "--help"):
            return None
        if not arg.startswith("-"):
            return arg
    return None


def main(argv: Sequence[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    for arg in argv:
        try:
            arg.encode()
        except UnicodeEncodeError:  # bytes the locale could not decode, kept as surrogates
            print(f"antre: argument {arg!r:.100}: not valid UTF-8 text", file=sys.stderr)
            return EXIT_USAGE
    try:
        parser = build_parser(argv)
    except errors.InvalidArgument as exc:  # a bad ANTRE_* default, e.g. ANTRE_REDIS_TLS=maybe
        print(f"antre: {exc}", file=sys.stderr)
        return EXIT_USAGE
    args = parser.parse_args(argv)
    command = load_command(args.command)
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
    except (errors.RedisUnavailable, redis.ConnectionError, redis.TimeoutError) as exc:
        print(prefix, connection.describe_failure(getattr(args, "redis_url", None) or "", exc),
              file=sys.stderr)
        return EXIT_UNAVAILABLE
    except redis.exceptions.RedisClusterException as exc:
        print(prefix, connection.describe_cluster_error(getattr(args, "redis_url", None) or "", exc),
              file=sys.stderr)
        return EXIT_UNAVAILABLE
    except errors.IdempotencyConflict as exc:  # the key names another job: 409 in the API
        print(prefix, exc, file=sys.stderr)
        return EXIT_CONFLICT
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
