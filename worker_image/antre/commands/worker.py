"""``antre worker``: run a worker process for one queue until SIGTERM or SIGINT."""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import signal
import sys
import threading
from dataclasses import dataclass
from typing import Any, Final

from antre import connection, errors, handlers, logs, settings
from antre.backoff import Backoff
from antre.commands import Command, listen_error

log = logging.getLogger("antre.worker")


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


def handler_modules(values: list[str]) -> list[str]:
    """Module names from repeated ``--handlers`` flags, each of which may be comma-separated
    like ``ANTRE_HANDLERS``."""
    return [name.strip() for value in values for name in value.split(",") if name.strip()]


def configure(parser: argparse.ArgumentParser) -> None:
    env = os.environ
    parser.add_argument("--handlers", action="append", default=None,
                        help="module(s) that register handlers, comma-separated or repeated "
                             "(env ANTRE_HANDLERS); the current directory is importable")
    for option in _WORKER_OPTIONS:
        # Converted in worker_settings_from_args, so a bad value names the flag AND the variable.
        parser.add_argument(option.flag, default=env.get(option.env),
                            help=f"{option.help}; env {option.env}")
    parser.add_argument("--log-level", default=env.get("ANTRE_LOG_LEVEL", "INFO"),
                        help="INFO logs every outcome; WARNING drops the per-job lines (process "
                             "start, stop and signals are always logged) (env ANTRE_LOG_LEVEL; "
                             "default %(default)s)")


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


def run(args: argparse.Namespace) -> int:
    logs.configure(args.log_level)
    worker_settings = worker_settings_from_args(args)
    queue_settings = settings.queue_settings_from_env(name=args.queue, prefix=args.prefix)
    modules = handler_modules(args.handlers if args.handlers is not None
                              else [os.environ.get("ANTRE_HANDLERS", "")])
    handlers.import_modules(modules)
    if not len(handlers.default_registry):
        raise errors.InvalidArgument(
            "--handlers: no handlers registered; name a module that uses @antre.handler "
            "(--handlers myapp.jobs or ANTRE_HANDLERS)")
    code = asyncio.run(_serve(args.redis_url, queue_settings, worker_settings))
    # A plain-def handler still running in a thread was released at the end of the grace
    # period, its result discarded. Interpreter exit would join that thread (for as long as the
    # handler takes, meanwhile running beside the worker that picked the job up): exit now.
    if any(t.name.startswith("antre-handler") and t.is_alive() for t in threading.enumerate()):
        logging.shutdown()
        sys.stdout.flush()
        os._exit(code)
    return code


async def _serve(url: str, queue_settings: settings.QueueSettings,
                 worker_settings: settings.WorkerSettings) -> int:
    from antre.client import AsyncQueue
    from antre.depth_metrics import DepthCollector
    from antre.metrics import WorkerMetrics
    from antre.metrics_server import serve_metrics
    from antre.worker import Worker
    metrics = WorkerMetrics(queue_settings.name)
    worker = Worker(connection.connect_async(url), queue_settings, worker_settings,
                    handlers.default_registry, metrics=metrics)
    depth = DepthCollector()  # queue depth, oldest age, live workers, lock contention
    server, depth_reads = None, None
    try:
        if worker_settings.metrics_port is not None:
            try:
                server = await serve_metrics(metrics.registry, port=worker_settings.metrics_port,
                                             healthy=worker.healthy)
            except OSError as exc:
                raise listen_error("--metrics-port", "0.0.0.0", worker_settings.metrics_port,
                                   exc) from None
            metrics.registry.register(depth)
            depth_reads = asyncio.create_task(depth.refresh_loop(
                [AsyncQueue(worker.redis, settings=queue_settings)]))
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, _stop, worker, sig, worker_settings.grace_period_s)
        await worker.run()
    finally:
        depth.stop()
        if depth_reads is not None:
            await asyncio.gather(depth_reads, return_exceptions=True)
        if server is not None:
            await server.cleanup()
        await worker.redis.aclose()
    return 0


def _stop(worker: Any, sig: signal.Signals, grace_period_s: float) -> None:
    log.info("stopping", extra={"signal": sig.name, "worker_id": worker.worker_id,
                                "grace_period_s": grace_period_s, "in_flight": worker.in_flight})
    worker.stop()


COMMAND: Final = Command("worker", "run a worker process", configure, run)
