"""``antre worker``: run a worker process for one queue until SIGTERM or SIGINT."""

from __future__ import annotations

import argparse
import asyncio
import importlib
import logging
import os
import signal
import socket
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
                             "of the rest every 10 s; DEBUG adds a line per claim, per acked run "
                             "and per job handed back; WARNING drops the per-job lines (process "
                             "start, stop and signals are always logged) (env ANTRE_LOG_LEVEL; "
                             "default %(default)s)")


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
    endpoint = None
    try:
        if metrics is not None and worker_settings.metrics_port is not None:
            try:  # bound now: a port in use stops the worker before it claims anything
                listener = socket.create_server(("0.0.0.0", worker_settings.metrics_port))
            except OSError as exc:
                raise listen_error("--metrics-port", "0.0.0.0", worker_settings.metrics_port,
                                   exc) from None
            endpoint = _MetricsEndpoint(listener, metrics, worker, queue_settings)
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, _stop, worker, sig, worker_settings.grace_period_s)
        await worker.run()
    finally:
        if endpoint is not None:
            await endpoint.stop()
        await worker.redis.aclose()
    return 0


def _import_endpoint_modules() -> None:
    importlib.import_module("antre.metrics_server")
    importlib.import_module("antre.depth_metrics")


class _MetricsEndpoint:
    """/metrics and /healthz on ``listener``, started beside the worker: the HTTP server
    (aiohttp) is the slowest import of a worker, so it is imported in a thread while the worker
    claims and runs its first jobs, and served once imported (a probe meanwhile finds the port
    open and waits for the answer)."""

    def __init__(self, listener: socket.socket, metrics: Any, worker: Any,
                 queue_settings: settings.QueueSettings) -> None:
        self.listener = listener
        self.metrics = metrics
        self.worker = worker
        self.queue_settings = queue_settings
        self.server: Any = None
        self.depth: Any = None
        self.depth_reads: asyncio.Task[None] | None = None
        self.starting = asyncio.create_task(self._start(), name="antre-metrics-endpoint")

    async def _start(self) -> None:
        try:
            await asyncio.to_thread(_import_endpoint_modules)
            from antre.client import AsyncQueue
            from antre.depth_metrics import DepthCollector
            from antre.metrics_server import serve_metrics
            self.server = await serve_metrics(self.metrics.registry, port=0,
                                              health=self.worker.health, listener=self.listener)
            self.depth = DepthCollector()  # depth, oldest age, live workers, lock contention
            self.metrics.registry.register(self.depth)
            self.depth_reads = asyncio.create_task(self.depth.refresh_loop(
                [AsyncQueue(self.worker.redis, settings=self.queue_settings)]))
        except Exception:  # without its endpoint the pod would be killed blind: stop cleanly
            log.exception("the metrics endpoint failed to start; stopping")
            self.worker.stop()

    async def stop(self) -> None:
        self.starting.cancel()
        await asyncio.gather(self.starting, return_exceptions=True)
        if self.depth is not None:
            self.depth.stop()
        if self.depth_reads is not None:
            await asyncio.gather(self.depth_reads, return_exceptions=True)
        if self.server is not None:
            await self.server.cleanup()
        self.listener.close()


def _stop(worker: Any, sig: signal.Signals, grace_period_s: float) -> None:
    log.info("stopping", extra={"signal": sig.name, "worker_id": worker.worker_id,
                                "grace_period_s": grace_period_s, "in_flight": worker.in_flight})
    worker.stop()


COMMAND: Final = Command("worker", "run a worker process", configure, run)
