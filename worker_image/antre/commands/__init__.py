"""The commands of ``antre``, one module per command; this module is what they share.

Each command module defines ``COMMAND``, a :class:`Command` (name, help, the function that adds
its arguments, the function that runs it). :mod:`antre.cli` imports the command modules, builds
the parser from their ``COMMAND`` and maps errors to exit codes; nothing here or in a command
imports the command line back, so data flows one way: cli -> commands -> the library.
"""

from __future__ import annotations

import argparse
import json
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, Final

from antre import connection, errors, fields, redis_urls, settings

if TYPE_CHECKING:
    from antre.client import Queue

DEFAULT_URL: Final = "redis://127.0.0.1:6379/0"

EXIT_USAGE: Final = 2
#: A job (or one of the given jobs) does not exist.
EXIT_NOT_FOUND: Final = 3
#: Some of what the command was to change conflicts with what Redis holds and was left as it
#: is; sysexits' EX_DATAERR.
EXIT_CONFLICT: Final = 65
#: Redis (or a port to listen on) is not available; sysexits' EX_UNAVAILABLE.
EXIT_UNAVAILABLE: Final = 69

class Unavailable(errors.AntreError):
    """Something the command needs is not available: a port to listen on is taken or not
    allowed, a job id given is not there. Exit status ``exit_code``."""

    def __init__(self, message: str, *, exit_code: int = EXIT_UNAVAILABLE) -> None:
        super().__init__(message)
        self.exit_code = exit_code


def listen_error(flag: str, host: str, port: int, exc: OSError) -> Unavailable:
    """One line for a port that cannot be bound (taken, privileged, bad address)."""
    reason = os.strerror(exc.errno) if exc.errno else str(exc)
    return Unavailable(f"{flag} {port}: cannot listen on {host}:{port} ({reason}); choose "
                       "another port or stop what uses it")


Configure = Callable[[argparse.ArgumentParser], None]
Run = Callable[[argparse.Namespace], int]


@dataclass(frozen=True, slots=True)
class Command:
    name: str
    help: str
    configure: Configure
    """Adds the command's own arguments."""
    run: Run
    """Runs it and returns the exit status; user errors raise :class:`antre.errors.AntreError`."""
    redis_args: bool = True
    """Whether the command takes ``--redis-url``, ``--queue`` and ``--prefix``."""


def redis_args(parser: argparse.ArgumentParser) -> None:
    env = os.environ
    parser.add_argument("--redis-url", default=env.get("ANTRE_REDIS_URL", DEFAULT_URL),
                        help="Redis URL: redis://, rediss:// (TLS), unix://, redis+sentinel://, "
                             "redis+cluster:// "
                             "(env ANTRE_REDIS_URL; default %(default)s)")
    parser.add_argument("--redis-tls", action="store_true",
                        default=env_flag(env, redis_urls.REQUIRE_TLS_ENV),
                        help="refuse a Redis URL without TLS before connecting (env "
                             f"{redis_urls.REQUIRE_TLS_ENV}=true; the operator sets it for a "
                             "JobQueue with spec.redis.tls)")
    for path in ("name", "prefix"):  # --queue, --prefix
        item = fields.entry(settings.QueueSettings, path)
        assert item.spec.flag and item.spec.env
        parser.add_argument(item.spec.flag, default=env.get(item.spec.env) or item.default,
                            help=f"{item.spec.help} (env {item.spec.env}; default %(default)s)")


_TRUE: Final = ("1", "true", "yes", "on")
_FALSE: Final = ("", "0", "false", "no", "off")


def env_flag(env: Mapping[str, str], name: str) -> bool:
    """A boolean environment variable; anything but the usual spellings is a usage error."""
    value = env.get(name, "").strip().lower()
    if value not in _TRUE + _FALSE:
        raise errors.InvalidArgument(f"{name}: got {env[name]!r}; must be true or false")
    return value in _TRUE


def check_redis_args(args: argparse.Namespace) -> None:
    """What is refused before any connection: a URL without TLS under ``--redis-tls``."""
    if args.redis_tls:
        redis_urls.require_tls(args.redis_url)


def json_flag(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--json", action="store_true", help="machine-readable output")


def open_queue(args: argparse.Namespace) -> Queue:
    from antre.client import Queue  # a worker's command line never needs the producer's client

    queue_settings = settings.queue_settings_from_env(name=args.queue, prefix=args.prefix)
    return Queue(connection.connect(args.redis_url), settings=queue_settings)


def print_json(value: Any) -> None:
    print(json.dumps(value, indent=2, sort_keys=True, default=str))


def format_ms(ms: int | None) -> str:
    """A Redis-clock timestamp in ms as UTC text, or ``-``."""
    if not ms:
        return "-"
    return datetime.fromtimestamp(ms / 1000, tz=UTC).strftime("%Y-%m-%d %H:%M:%S.%f")[:-3] + "Z"
