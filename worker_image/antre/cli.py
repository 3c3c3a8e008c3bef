"""The ``antre`` command line: worker, reaper, enqueue, stats, job, dlq, cancel, demo.

Every command reads ``--redis-url`` / ``ANTRE_REDIS_URL`` and ``--queue`` / ``ANTRE_QUEUE``.
User errors (bad arguments, Redis unreachable, unknown job) print one line to stderr and exit
non-zero; no tracebacks.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import signal
import sys
import threading
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from typing import Any

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

def _worker_args(parser: argparse.ArgumentParser) -> None:
    env = os.environ
    parser.add_argument("--handlers", action="append",
                        default=[m for m in env.get("ANTRE_HANDLERS", "").split(",") if m],
                        help="module that registers handlers (repeatable; env ANTRE_HANDLERS, "
                             "comma-separated)")
    parser.add_argument("--concurrency", type=int, default=env.get("ANTRE_CONCURRENCY"))
    parser.add_argument("--visibility-timeout", type=float, default=env.get("ANTRE_VISIBILITY_TIMEOUT"),
                        help="lease length in seconds (default 30)")
    parser.add_argument("--job-timeout", type=float, default=env.get("ANTRE_JOB_TIMEOUT"),
                        help="longest run of one job in seconds (default: none)")
    parser.add_argument("--backoff-base", type=float, default=env.get("ANTRE_BACKOFF_BASE"))
    parser.add_argument("--backoff-max", type=float, default=env.get("ANTRE_BACKOFF_MAX"))
    parser.add_argument("--grace-period", type=float, default=env.get("ANTRE_GRACE_PERIOD"),
                        help="seconds running jobs may finish on SIGTERM before they are released")
    parser.add_argument("--reaper-interval", type=float, default=env.get("ANTRE_REAPER_INTERVAL"),
                        help="seconds between in-process reaper passes (default 5)")
    parser.add_argument("--lock-defer", type=float, default=env.get("ANTRE_LOCK_DEFER"),
                        help="seconds a job waits when its resource is busy (default 1)")
    parser.add_argument("--lock-max-deferrals", type=int, default=env.get("ANTRE_LOCK_MAX_DEFERRALS"),
                        help="waits for a busy resource before the job is dead-lettered (default 600)")
    parser.add_argument("--metrics-port", type=int, default=env.get("ANTRE_METRICS_PORT"),
                        help="serve /metrics and /healthz on this port")
    parser.add_argument("--log-level", default=env.get("ANTRE_LOG_LEVEL", "INFO"))


def worker_settings_from_args(args: argparse.Namespace) -> settings.WorkerSettings:
    values: dict[str, Any] = {}
    for name, attr, kind in (("concurrency", "concurrency", int),
                             ("visibility_timeout", "visibility_timeout_s", float),
                             ("job_timeout", "job_timeout_s", float),
                             ("grace_period", "grace_period_s", float),
                             ("reaper_interval", "reaper_interval_s", float),
                             ("lock_defer", "lock_defer_s", float),
                             ("lock_max_deferrals", "lock_max_deferrals", int),
                             ("metrics_port", "metrics_port", int)):
        raw = getattr(args, name)
        if raw is not None and raw != "":
            try:
                values[attr] = kind(raw)
            except ValueError:
                raise errors.InvalidArgument(f"--{name.replace('_', '-')}: got {raw!r}; must be "
                                             f"{'an integer' if kind is int else 'a number'}") from None
    base = float(args.backoff_base) if args.backoff_base not in (None, "") else None
    cap = float(args.backoff_max) if args.backoff_max not in (None, "") else None
    if base is not None or cap is not None:
        default = Backoff()
        base_s = base if base is not None else default.base_s
        values["backoff"] = Backoff(base_s=base_s,
                                    max_s=cap if cap is not None else max(default.max_s, base_s))
    return settings.WorkerSettings(**values)


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
    from antre.serving import serve_metrics
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
    parser.add_argument("--once", action="store_true", help="one pass, then exit (CronJob)")
    parser.add_argument("--interval", type=float, default=5.0, help="seconds between passes")


@register("reaper", "requeue expired leases and promote due retries")(_reaper_args)
def run_reaper(args: argparse.Namespace) -> int:
    from antre import reaper
    queue = open_queue(args)
    while True:
        totals = reaper.run_once(queue.redis, queue.settings)
        print(json.dumps({"queue": queue.name, "requeued": totals.requeued, "dead": totals.dead,
                          "promoted": totals.promoted, "workers_dropped": totals.workers_dropped,
                          "calls": totals.passes}), flush=True)
        if args.once:
            return 0
        asyncio.run(asyncio.sleep(args.interval))


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
        print(f"idempotency key {args.idempotency_key!r} is live: existing job returned",
              file=sys.stderr)
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
    if info.last_error:
        print(f"  last_error:      {info.last_error}")
    print(f"  payload:         {json.dumps(info.payload)[:500]}")
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
    parser.add_argument("job_ids", nargs="*", help="ids to replay or purge (default: all, up to --limit)")
    parser.add_argument("--limit", type=int, default=100)
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
    elif args.action == "replay":
        replayed = queue.replay(args.job_ids, limit=args.limit)
        print(f"replayed {len(replayed)} job(s)")
    else:
        print(f"purged {queue.purge(args.job_ids, limit=args.limit)} job(s)")
    return 0


def _cancel_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("job_id")


@register("cancel", "withdraw a job that is not running")(_cancel_args)
def run_cancel(args: argparse.Namespace) -> int:
    previous = open_queue(args).cancel(args.job_id)
    print(f"job {args.job_id}: was {previous}" + ("" if previous in ("done", "cancelled")
                                                  else ", now cancelled"))
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
        print(f"antre {args.command}: Redis at {url} is unreachable: {exc}", file=sys.stderr)
        return EXIT_UNAVAILABLE
    except (errors.ProtocolError, redis.ResponseError) as exc:  # OOM, NOPERM, READONLY...
        print(f"antre {args.command}: Redis refused the command: {exc}", file=sys.stderr)
        return EXIT_UNAVAILABLE
    except errors.AntreError as exc:
        print(f"antre {args.command}: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
