"""``antre worker``: run a worker process for one queue until SIGTERM or SIGINT."""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import signal
import sys
import threading
from typing import Any, Final

from antre import connection, errors, fields, handlers, logs, settings
from antre.commands import Command, listen_error

log = logging.getLogger("antre.worker")


def handler_modules(values: list[str]) -> list[str]:
    """Module names from repeated ``--handlers`` flags, each of which may be comma-separated
    like ``ANTRE_HANDLERS``."""
    return [name.strip() for value in values for name in value.split(",") if name.strip()]


def configure(parser: argparse.ArgumentParser) -> None:
    env = os.environ
    parser.add_argument("--handlers", action="append", default=None,
                        help="module(s) that register handlers, comma-separated or repeated "
                             "(env ANTRE_HANDLERS); the current directory is importable")
    fields.add_arguments(parser, settings.WorkerSettings)
    parser.add_argument("--log-level", default=env.get("ANTRE_LOG_LEVEL", "INFO"),
                        help="INFO logs every failed, released or lost run and a 'settled' summary "
                             "of the rest every 10 s; DEBUG adds a line per claim and per acked "
                             "run; WARNING drops the per-job lines (process start, stop and "
                             "signals are always logged) (env ANTRE_LOG_LEVEL; default %(default)s)")


def worker_settings_from_args(args: argparse.Namespace) -> settings.WorkerSettings:
    """Flags, else ANTRE_* variables, else defaults; messages name the flag and the variable."""
    return settings.worker_settings(
        fields.values_from_args(settings.WorkerSettings, args, os.environ))


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
    from antre.worker import Worker
    # Only a worker serving /metrics counts for Prometheus: prometheus-client and the HTTP server
    # (aiohttp) are most of what a worker would import beyond redis-py and its own modules.
    metrics = None
    if worker_settings.metrics_port is not None:
        from antre.metrics import WorkerMetrics
        metrics = WorkerMetrics(queue_settings.name)
    worker = Worker(connection.connect_async(url), queue_settings, worker_settings,
                    handlers.default_registry, metrics=metrics)
    depth, server, depth_reads = None, None, None
    try:
        if metrics is not None and worker_settings.metrics_port is not None:
            from antre.client import AsyncQueue
            from antre.depth_metrics import DepthCollector
            from antre.metrics_server import serve_metrics
            depth = DepthCollector()  # queue depth, oldest age, live workers, lock contention
            try:
                server = await serve_metrics(metrics.registry, port=worker_settings.metrics_port,
                                             health=worker.health)
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
        if depth is not None:
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
