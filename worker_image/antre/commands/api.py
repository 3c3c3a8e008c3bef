"""``antre api``: serve the HTTP producer API (:mod:`antre.api`) for the queue it is started for."""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import signal
from typing import Any, Final

from aiohttp import web

from antre import api, connection, errors, logs, settings
from antre.commands import Command, listen_error

log = logging.getLogger("antre.api")


def configure(parser: argparse.ArgumentParser) -> None:
    env = os.environ
    # String defaults: argparse converts them only when `api` runs, so a bad value in the env
    # is a usage error of `antre api`, not a traceback of every other command.
    parser.add_argument("--port", type=int, default=env.get("ANTRE_API_PORT") or str(api.DEFAULT_PORT),
                        help="listen port (env ANTRE_API_PORT; default %(default)s)")
    parser.add_argument("--host", default=env.get("ANTRE_API_HOST", "0.0.0.0"),
                        help="listen address (env ANTRE_API_HOST; default %(default)s)")
    parser.add_argument("--max-body-bytes", type=int,
                        default=env.get("ANTRE_API_MAX_BODY_BYTES") or str(api.DEFAULT_MAX_BODY_BYTES),
                        help="largest request body (env ANTRE_API_MAX_BODY_BYTES; default "
                             "%(default)s)")
    parser.add_argument("--log-level", default=env.get("ANTRE_LOG_LEVEL", "INFO"),
                        help="log level (env ANTRE_LOG_LEVEL; default %(default)s)")


def token_from_env() -> str | None:
    """ANTRE_API_TOKEN without surrounding whitespace (a Secret made from a file often ends in a
    newline, which no client sends back), or None when unset or blank."""
    return (os.environ.get("ANTRE_API_TOKEN") or "").strip() or None


def run(args: argparse.Namespace) -> int:
    logs.configure(args.log_level)
    token = token_from_env()
    if token is None:
        log.warning("ANTRE_API_TOKEN is not set: /v1/ is served without authentication")
    if not 0 <= args.port <= 65535:
        raise errors.InvalidArgument(f"--port: got {args.port}; must be from 0 to 65535")
    api_settings = api.ApiSettings(token=token, max_body_bytes=args.max_body_bytes,
                                   metrics_queues=(args.queue,))
    queue_template = settings.queue_settings_from_env(name=args.queue, prefix=args.prefix)
    redis_client = connection.connect_async(args.redis_url)
    app = api.create_app(redis_client, queue_template=queue_template, api_settings=api_settings)
    asyncio.run(_serve(app, redis_client, host=args.host, port=args.port,
                       redis_url=args.redis_url))
    return 0


async def _serve(app: web.Application, redis_client: Any, *, host: str, port: int,
                 redis_url: str) -> None:
    """Serves until SIGTERM or SIGINT, logging the start (once bound), the signal and the stop."""
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    try:
        try:
            await web.TCPSite(runner, host, port).start()
        except OSError as exc:
            raise listen_error("--port", host, port, exc) from None
        log.info("api listening", extra={"addresses": [f"{a[0]}:{a[1]}" for a in runner.addresses],
                                         "redis": connection.redact(redis_url)})
        received: asyncio.Future[signal.Signals] = asyncio.get_running_loop().create_future()

        def on_signal(sig: signal.Signals) -> None:
            if not received.done():
                received.set_result(sig)

        for sig in (signal.SIGTERM, signal.SIGINT):
            asyncio.get_running_loop().add_signal_handler(sig, on_signal, sig)
        log.info("api stopping", extra={"signal": (await received).name})
    finally:
        await runner.cleanup()  # finishes requests in flight, then closes
        await redis_client.aclose()
    log.info("api stopped")


COMMAND: Final = Command("api", "serve the HTTP producer API (token from env ANTRE_API_TOKEN)",
                         configure, run)
