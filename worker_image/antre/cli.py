"""The ``antre`` command line: worker, reaper, enqueue, stats, job, dlq, cancel, demo.

Every command reads ``--redis-url`` / ``ANTRE_REDIS_URL`` and ``--queue`` / ``ANTRE_QUEUE``.
User errors (bad arguments, Redis unreachable, unknown job) print one line to stderr and exit
non-zero; no tracebacks.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import logging
import os
import signal
import sys
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Final

import redis

from antre import connection, errors, handlers, logs, settings
from antre.backoff import Backoff
from antre.client import Queue

DEFAULT_URL = "redis://127.0.0.1:6379/0"

EXIT_USAGE = 2
EXIT_UNAVAILABLE = 69  # EX_UNAVAILABLE
EXIT_NOT_FOUND = 3

Command = Callable[[argparse.Namespace], int]
#: Subcommand name -> (configure parser, run). Other modules add theirs with ``register``.
COMMANDS: dict[str, tuple[Callable[[argparse.ArgumentParser], None], Command, str]] = {}


def register(name: str, help_text: str) -> Callable[[Callable[[argparse.ArgumentParser], None]],
                                                   Callable[[Command], Command]]:
    def configure(add_args: Callable[[argparse.ArgumentParser], None]) -> Callable[[Command], Command]:
        def bind(run: Command) -> Command:
            COMMANDS[name] = (add_args, run, help_text)
            return run
        return bind
    return configure


def common_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--redis-url", default=os.environ.get("ANTRE_REDIS_URL", DEFAULT_URL),
                        help="Redis URL (env ANTRE_REDIS_URL; default %(default)s)")
    parser.add_argument("--queue", default=os.environ.get("ANTRE_QUEUE", "default"),
                        help="queue name (env ANTRE_QUEUE; default %(default)s)")
    parser.add_argument("--prefix", default=os.environ.get("ANTRE_PREFIX", "antre"),
                        help="key prefix (env ANTRE_PREFIX; default %(default)s)")


def open_queue(args: argparse.Namespace) -> Queue:
    queue_settings = settings.queue_settings_from_env(name=args.queue, prefix=args.prefix)
    return Queue(connection.connect(args.redis_url), settings=queue_settings)


def _ms(ms: int | None) -> str:
    if not ms:
        return "-"
    return datetime.fromtimestamp(ms / 1000, tz=UTC).strftime("%Y-%m-%d %H:%M:%S.%f")[:-3] + "Z"


def _print_json(value: Any) -> None:
    print(json.dumps(value, indent=2, sort_keys=True, default=str))


# -- worker ----------------------------------------------------------------------------------

@dataclass(frozen=True, slots=True)
class _Option:
    """A worker option: its flag, its environment variable and the setting it becomes."""

    flag: str
    env: str
    setting: str
    kind: type[int] | type[float]
    help: str

    @property
    def dest(self) -> str:
        return self.flag[2:].replace("-", "_")

    @property
    def label(self) -> str:
        return f"{self.flag} (env {self.env})"


_WORKER_OPTIONS: Final = (
    _Option("--concurrency", "ANTRE_CONCURRENCY", "concurrency", int,
            "jobs run at once (default 16)"),
    _Option("--visibility-timeout", "ANTRE_VISIBILITY_TIMEOUT", "visibility_timeout_s", float,
            "lease length in seconds, at least 1 (default 30)"),
    _Option("--job-timeout", "ANTRE_JOB_TIMEOUT", "job_timeout_s", float,
            "longest run of one job in seconds (default: none)"),
    _Option("--grace-period", "ANTRE_GRACE_PERIOD", "grace_period_s", float,
            "seconds running jobs may finish on SIGTERM before they are released (default 25)"),
    _Option("--reaper-interval", "ANTRE_REAPER_INTERVAL", "reaper_interval_s", float,
            "seconds between in-process reaper passes (default 5)"),
    _Option("--lock-defer", "ANTRE_LOCK_DEFER", "lock_defer_s", float,
            "seconds a job waits when its resource is busy (default 1)"),
    _Option("--lock-max-deferrals", "ANTRE_LOCK_MAX_DEFERRALS", "lock_max_deferrals", int,
            "waits for a busy resource before the job is dead-lettered (default 600)"),
    _Option("--metrics-port", "ANTRE_METRICS_PORT", "metrics_port", int,
            "serve /metrics and /healthz on this port (default: off)"),
    _Option("--backoff-base", "ANTRE_BACKOFF_BASE", "base_s", float,
            "first retry delay scale in seconds (default 1)"),
    _Option("--backoff-max", "ANTRE_BACKOFF_MAX", "max_s", float,
            "cap on a retry delay in seconds (default 300)"),
)


def _worker_args(parser: argparse.ArgumentParser) -> None:
    env = os.environ
    parser.add_argument("--handlers", action="append",
                        default=[m for m in env.get("ANTRE_HANDLERS", "").split(",") if m],
                        help="module that registers handlers (repeatable; env ANTRE_HANDLERS, "
                             "comma-separated); the current directory is importable")
    for option in _WORKER_OPTIONS:
        # Converted in worker_settings_from_args, so a bad value names the flag AND the variable.
        parser.add_argument(option.flag, default=env.get(option.env),
                            help=f"{option.help}; env {option.env}")
    parser.add_argument("--log-level", default=env.get("ANTRE_LOG_LEVEL", "INFO"),
                        help="INFO (default) logs every outcome; WARNING drops the acked lines")


def worker_settings_from_args(args: argparse.Namespace) -> settings.WorkerSettings:
    values: dict[str, Any] = {}
    backoff: dict[str, float] = {}
    for option in _WORKER_OPTIONS:
        raw = getattr(args, option.dest)
        if raw is None or raw == "":
            continue
        try:
            value = option.kind(raw)
        except ValueError:
            wanted = "an integer" if option.kind is int else "a number"
            raise errors.InvalidArgument(f"{option.label}: got {raw!r}; must be {wanted}") from None
        (backoff if option.flag.startswith("--backoff") else values)[option.setting] = value
    try:
        if backoff:
            default = Backoff()
            base_s = backoff.get("base_s", default.base_s)
            values["backoff"] = Backoff(base_s=base_s,
                                        max_s=backoff.get("max_s", max(default.max_s, base_s)))
        return settings.WorkerSettings(**values)
    except errors.InvalidArgument as exc:
        # The settings name their fields; a user typed a flag or set a variable.
        message = str(exc)
        for option in _WORKER_OPTIONS:
            field = {"base_s": "backoff base", "max_s": "backoff max"}.get(option.setting,
                                                                         option.setting)
            if message.startswith(field + ":"):
                message = option.label + message[len(field):]
                break
        raise errors.InvalidArgument(message) from None


@register("worker", "run a worker process")(_worker_args)
def run_worker(args: argparse.Namespace) -> int:
    logs.configure(args.log_level)
    worker_settings = worker_settings_from_args(args)
    queue_settings = settings.queue_settings_from_env(name=args.queue, prefix=args.prefix)
    handlers.import_modules(args.handlers)
    if not len(handlers.default_registry):
        raise errors.InvalidArgument(
            "--handlers: no handlers registered; name a module that uses @antre.handler "
            "(--handlers myapp.jobs or ANTRE_HANDLERS)")
    code = asyncio.run(_serve_worker(args.redis_url, queue_settings, worker_settings))
    # A plain-def handler still running in a thread was released at the end of the grace
    # period, its result discarded. Interpreter exit would join that thread (for as long as the
    # handler takes, meanwhile running beside the worker that picked the job up): exit now.
    if any(t.name.startswith("antre-handler") and t.is_alive() for t in threading.enumerate()):
        logging.shutdown()
        sys.stdout.flush()
        os._exit(code)
    return code


async def _serve_worker(url: str, queue_settings: settings.QueueSettings,
                        worker_settings: settings.WorkerSettings) -> int:
    from antre.client import AsyncQueue
    from antre.depth_metrics import DepthCollector
    from antre.metrics import WorkerMetrics
    from antre.metrics_server import serve_metrics
    from antre.worker import Worker
    metrics = WorkerMetrics(queue_settings.name)
    worker = Worker(connection.connect_async(url), queue_settings, worker_settings,
                    handlers.default_registry, metrics=metrics)
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, worker.stop)
    server = None
    depth = DepthCollector()  # queue depth, oldest age, live workers, lock contention
    if worker_settings.metrics_port is not None:
        metrics.registry.register(depth)
        depth_reads = asyncio.create_task(depth.refresh_loop([AsyncQueue(worker.redis,
                                                                         settings=queue_settings)]))
        server = await serve_metrics(metrics.registry, port=worker_settings.metrics_port,
                                     healthy=worker.healthy)
    try:
        await worker.run()
    finally:
        depth.stop()
        if server is not None:
            await asyncio.gather(depth_reads, return_exceptions=True)
            await server.cleanup()
        await worker.redis.aclose()
    return 0


# -- reaper ----------------------------------------------------------------------------------

def _reaper_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--once", action="store_true",
                        help="one pass, print what it did, exit (what the CronJob runs)")
    parser.add_argument("--interval", type=float, default=5.0,
                        help="without --once: seconds between passes (default 5); only passes "
                             "that did something are printed")


@register("reaper", "requeue expired leases and promote due retries")(_reaper_args)
def run_reaper(args: argparse.Namespace) -> int:
    from antre import reaper
    queue = open_queue(args)
    if not args.interval > 0:
        raise errors.InvalidArgument(f"--interval: got {args.interval}; must be > 0 seconds")
    while True:
        totals = reaper.run_once(queue.redis, queue.settings)
        if args.once or totals.requeued or totals.dead or totals.promoted or totals.workers_dropped:
            print(json.dumps({"queue": queue.name, "requeued": totals.requeued, "dead": totals.dead,
                              "promoted": totals.promoted, "workers_dropped": totals.workers_dropped,
                              "calls": totals.passes}), flush=True)
        if args.once:
            return 0
        time.sleep(args.interval)


# -- producer and inspection -----------------------------------------------------------------

def _enqueue_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("type", help="job type (the handler name)")
    parser.add_argument("payload", help="JSON payload, e.g. '{\"to\": \"a@b.c\"}'")
    parser.add_argument("--idempotency-key")
    parser.add_argument("--resource-key")
    parser.add_argument("--max-attempts", type=int)
    parser.add_argument("--delay", type=float, default=0.0, help="seconds before it may run")


@register("enqueue", "add a job; prints its id")(_enqueue_args)
def run_enqueue(args: argparse.Namespace) -> int:
    try:
        payload = json.loads(args.payload)
    except ValueError as exc:
        raise errors.InvalidArgument(f"payload: not valid JSON ({exc}): {args.payload!r}") from None
    result = open_queue(args).enqueue(
        args.type, payload, idempotency_key=args.idempotency_key, resource_key=args.resource_key,
        max_attempts=args.max_attempts, delay=args.delay)
    print(result.job_id)
    if not result.created:
        print(f"idempotency key {args.idempotency_key!r} already used: job {result.job_id} "
              "returned, nothing new enqueued", file=sys.stderr)
    return 0


def _json_flag(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--json", action="store_true", help="machine-readable output")


@register("stats", "queue counts: ready, processing, retry, dead, done")(_json_flag)
def run_stats(args: argparse.Namespace) -> int:
    queue = open_queue(args)
    depth = queue.stats()
    try:
        warning = queue.eviction_policy_warning()
    except redis.ResponseError:  # INFO denied by an ACL or renamed on managed Redis
        warning = None
    data = {
        "queue": queue.name, "ready": depth.ready, "processing": depth.processing,
        "expired_leases": depth.expired_leases, "retry": depth.scheduled, "retry_due": depth.due,
        "dead": depth.dead, "done": depth.counters.get("done", 0), "workers": depth.workers,
        "oldest_ready_age_s": depth.oldest_ready_age_s, "counters": depth.counters,
    }
    if warning:
        print(f"WARNING: {warning}", file=sys.stderr)
    if args.json:
        _print_json(data)
    else:
        for key in ("queue", "ready", "processing", "expired_leases", "retry", "retry_due", "dead",
                    "done", "workers", "oldest_ready_age_s"):
            print(f"{key:>20}: {data[key] if data[key] is not None else '-'}")
    return 0


def _job_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("job_id")
    _json_flag(parser)


@register("job", "show one job with its lifecycle history")(_job_args)
def run_job(args: argparse.Namespace) -> int:
    info = open_queue(args).get(args.job_id)
    if args.json:
        _print_json(info.to_dict())
        return 0
    print(f"job {info.id}  type={info.type}  status={info.status}  "
          f"attempt={info.attempt}/{info.max_attempts}")
    if info.idempotency_key:
        print(f"  idempotency_key: {info.idempotency_key}")
    if info.resource_key:
        print(f"  resource_key:    {info.resource_key}")
    if info.outcome:
        print(f"  outcome:         {info.outcome}")
    if info.last_error:
        print(f"  last_error:      {info.last_error}")
    print(f"  payload:         {json.dumps(info.payload)[:500]}")
    for step, result in info.steps.items():
        print(f"  step {step}: {json.dumps(result)[:200]}")
    print("  history:")
    for event in info.history:
        bits = [f"{_ms(event.at_ms)}  {event.event:<14}"]
        if event.attempt is not None:
            bits.append(f"attempt={event.attempt}")
        if event.worker:
            bits.append(f"worker={event.worker}")
        if event.error:
            bits.append(f"error={event.error}")
        print("    " + "  ".join(bits))
    return 0


def _dlq_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("action", choices=["list", "replay", "purge"])
    parser.add_argument("job_ids", nargs="*", help="ids to replay or purge")
    parser.add_argument("--all", action="store_true",
                        help="replay or purge every dead job (needed when no ids are given)")
    parser.add_argument("--limit", type=int, default=100, help="jobs listed (default 100)")
    _json_flag(parser)


@register("dlq", "dead-letter list, replay, purge")(_dlq_args)
def run_dlq(args: argparse.Namespace) -> int:
    queue = open_queue(args)
    if args.limit < 1:
        raise errors.InvalidArgument(f"--limit: got {args.limit}; must be >= 1")
    if args.action == "list":
        jobs = queue.dead_letters(limit=args.limit)
        if args.json:
            _print_json([job.to_dict() for job in jobs])
        else:
            for job in jobs:
                print(f"{job.id}  {job.type:<20} attempts={job.attempt}  {job.last_error or ''}")
            print(f"{len(jobs)} dead job(s) shown", file=sys.stderr)
        return 0
    if bool(args.job_ids) == args.all:
        raise errors.InvalidArgument(
            f"dlq {args.action}: give job ids, or --all for every dead job (not both)")
    if args.job_ids:
        done = (len(queue.replay(args.job_ids)) if args.action == "replay"
                else queue.purge(args.job_ids))
    else:
        # In batches, so Redis is never blocked for long; at most the jobs dead at the start,
        # so replayed jobs that die again meanwhile are not replayed in a loop.
        done, wanted = 0, queue.stats().dead
        while done < wanted:
            batch = (len(queue.replay(limit=min(DLQ_BATCH, wanted - done)))
                     if args.action == "replay" else queue.purge(limit=min(DLQ_BATCH, wanted - done)))
            done += batch
            if batch == 0:
                break
    print(f"{'replayed' if args.action == 'replay' else 'purged'} {done} job(s)")
    return 0


#: Dead jobs replayed or purged per script call with --all.
DLQ_BATCH: Final = 1000


def _cancel_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("job_id")


@register("cancel", "withdraw a job that is not running")(_cancel_args)
def run_cancel(args: argparse.Namespace) -> int:
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


def build_parser() -> argparse.ArgumentParser:
    import antre.api  # registers `api` (the noqa below covers the group)
    import antre.demo
    import antre.inspect_cmd  # noqa: F401  (registers `demo`, `inspect`, `doctor`, `top`)
    parser = argparse.ArgumentParser(prog="antre", description="antre: a reliable Redis job queue")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name, (add_args, _run, help_text) in COMMANDS.items():
        command_parser = sub.add_parser(name, help=help_text, description=help_text)
        common_args(command_parser)
        add_args(command_parser)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    _add_args, run, _help = COMMANDS[args.command]
    try:
        return run(args)
    except errors.JobNotFound as exc:
        print(f"antre {args.command}: {exc}", file=sys.stderr)
        return EXIT_NOT_FOUND
    except errors.RedisRefused as exc:
        print(f"antre {args.command}: {exc}", file=sys.stderr)
        return EXIT_UNAVAILABLE
    except (errors.RedisUnavailable, redis.ConnectionError, redis.TimeoutError) as exc:
        url = connection.redact(getattr(args, "redis_url", "") or "")
        reason = str(exc).removeprefix("Redis is unreachable: ")
        print(f"antre {args.command}: Redis at {url} is unreachable: {reason}", file=sys.stderr)
        return EXIT_UNAVAILABLE
    except (errors.ProtocolError, redis.ResponseError) as exc:  # OOM, NOPERM, READONLY...
        print(f"antre {args.command}: Redis refused the command: {exc}", file=sys.stderr)
        return EXIT_UNAVAILABLE
    except errors.AntreError as exc:
        print(f"antre {args.command}: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:  # `antre job ID | head`: the reader left; that is not an error
        with contextlib.suppress(OSError):
            sys.stdout = open(os.devnull, "w")  # noqa: SIM115 - replaces the closed stdout
        return 0


if __name__ == "__main__":
    sys.exit(main())
