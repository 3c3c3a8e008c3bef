"""``antre api``: serve the HTTP producer API (:mod:`antre.api`) for the queue it is started for."""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import logging
import os
import signal
from typing import TYPE_CHECKING, Any, Final

from antre import connection, errors, fields, logs, loopback, settings
from antre.commands import Command, listen_error

if TYPE_CHECKING:
    from aiohttp import web

    from antre import api

# The HTTP server (aiohttp, the dashboard's templates) is imported by the functions that use it,
# so every other sub-command of the command line starts without it (a worker in ~0.1 s less).

log = logging.getLogger("antre.api")


def configure(parser: argparse.ArgumentParser) -> None:
    from antre import api
    from antre.dashboard.state import DashboardSettings
    env = os.environ
    # The settings' flags (--port, body size and time, connections) are converted only when
    # `api` runs, by fields.values_from_args: a bad value in the env is one line of `antre api`
    # naming the flag and the variable, not a usage error of every other command.
    parser.add_argument("--host", default=env.get("ANTRE_API_HOST"),
                        help="listen address (env ANTRE_API_HOST; default 0.0.0.0, or 127.0.0.1 "
                             "with --no-auth)")
    parser.add_argument("--queues", default=env.get("ANTRE_API_QUEUES"),
                        help="comma-separated queues to serve (env ANTRE_API_QUEUES; default: "
                             "--queue only); requests for any other queue get 403")
    parser.add_argument("--no-auth", action="store_true",
                        help="serve /v1/ without a token (ANTRE_API_TOKEN must be unset); "
                             "listens on 127.0.0.1 unless --host is given (default: off)")
    parser.add_argument("--metrics-auth", action="store_true", default=None,
                        help="require the token on /metrics too (env ANTRE_API_METRICS_AUTH=true; "
                             "default: /metrics is open)")
    fields.add_arguments(parser, api.ApiSettings)  # port, body size and time, connections
    parser.add_argument("--log-level", default=env.get("ANTRE_LOG_LEVEL", "INFO"),
                        help="log level (env ANTRE_LOG_LEVEL; default %(default)s)")
    parser.add_argument("--dashboard", action="store_true", default=None,
                        help="serve the web dashboard under /ui, signed in with the API token "
                             "(env ANTRE_DASHBOARD=true)")
    parser.add_argument("--dashboard-read-only", action="store_true", default=None,
                        help="the dashboard shows everything and changes nothing (env "
                             "ANTRE_DASHBOARD_READ_ONLY=true)")
    fields.add_arguments(parser, DashboardSettings)  # live interval, sessions, tabs


def flag_from_env(name: str, given: bool | None) -> bool:
    """A command-line switch, else its environment variable (true/false, 1/0, yes/no, on/off)."""
    if given is not None:
        return given
    raw = (os.environ.get(name) or "").strip().lower()
    if raw in ("", "0", "false", "no", "off"):
        return False
    if raw in ("1", "true", "yes", "on"):
        return True
    raise errors.InvalidArgument(f"{name}: got {raw!r}; must be true or false")


def token_from_env() -> str | None:
    """ANTRE_API_TOKEN without surrounding whitespace (a Secret made from a file often ends in a
    newline, which no client sends back); None when unset. Set but blank is an error: an empty
    Secret key must not turn authentication off."""
    raw = os.environ.get("ANTRE_API_TOKEN")
    if raw is None:
        return None
    try:
        raw.encode()
    except UnicodeEncodeError as exc:  # bytes the locale could not decode, kept as surrogates
        position = len(os.fsencode(raw[:exc.start]))
        raise errors.InvalidArgument(
            f"ANTRE_API_TOKEN: not UTF-8 text (byte 0x{os.fsencode(raw)[position]:02x} at "
            f"position {position}); use a text token, e.g. openssl rand -hex 32") from None
    if not raw.strip():
        raise errors.InvalidArgument(
            "ANTRE_API_TOKEN: set but empty (or only whitespace); an empty token would turn "
            "authentication off. Put a secret in it (e.g. openssl rand -hex 32), or unset it "
            "and choose --no-auth")
    return raw.strip()


def api_settings_from_args(args: argparse.Namespace) -> api.ApiSettings:
    from antre import api
    token = token_from_env()
    if args.no_auth and token is not None:
        raise errors.InvalidArgument("--no-auth: ANTRE_API_TOKEN is set too; choose one")
    queues = tuple(dict.fromkeys(q.strip() for q in (args.queues or args.queue).split(",")
                                 if q.strip()))
    return api.ApiSettings(queues=queues, token=token, anonymous=args.no_auth,
                           metrics_auth=flag_from_env("ANTRE_API_METRICS_AUTH", args.metrics_auth),
                           **fields.values_from_args(api.ApiSettings, args, os.environ))


def run(args: argparse.Namespace) -> int:
    from antre import api
    from antre.dashboard.state import DashboardSettings
    logs.configure(args.log_level)
    api_settings = api_settings_from_args(args)
    host = args.host or ("127.0.0.1" if api_settings.anonymous else "0.0.0.0")
    if api_settings.anonymous and loopback.listens_on_loopback(host):
        listen_name = "" if loopback.names_loopback(host.lower()) else host.lower().rstrip(".")
        api_settings = dataclasses.replace(api_settings, local_hosts_only=True,
                                           listen_name=listen_name)
    if api_settings.anonymous:
        log.warning("serving /v1/ without authentication (--no-auth)", extra={"host": host})
    queue_template = settings.queue_settings_from_env(name=api_settings.queues[0],
                                                      prefix=args.prefix)
    redis_client = connection.connect_async(args.redis_url)
    read_only = flag_from_env("ANTRE_DASHBOARD_READ_ONLY", args.dashboard_read_only)
    dashboard = None
    if flag_from_env("ANTRE_DASHBOARD", args.dashboard) or read_only:
        dashboard = fields.build(DashboardSettings, {
            **fields.values_from_args(DashboardSettings, args, os.environ),
            "read_only": read_only})
    app = api.create_app(redis_client, queue_template=queue_template, api_settings=api_settings,
                         dashboard=dashboard)
    asyncio.run(_serve(app, redis_client, host=host, port=api_settings.port,
                       redis_url=args.redis_url, queues=api_settings.queues))
    return 0


async def _serve(app: web.Application, redis_client: Any, *, host: str, port: int,
                 redis_url: str, queues: tuple[str, ...]) -> None:
    """Serves until SIGTERM or SIGINT, logging the start (once bound), the signal and the stop."""
    from antre import api
    try:
        try:
            running = await api.start(app, host=host, port=port)
        except OSError as exc:
            raise listen_error("--port", host, port, exc) from None
        log.info("api listening", extra={"addresses": [f"{h}:{p}" for h, p in running.addresses],
                                         "queues": list(queues),
                                         "redis": connection.redact(redis_url)})
        received: asyncio.Future[signal.Signals] = asyncio.get_running_loop().create_future()

        def on_signal(sig: signal.Signals) -> None:
            if not received.done():
                received.set_result(sig)

        for sig in (signal.SIGTERM, signal.SIGINT):
            asyncio.get_running_loop().add_signal_handler(sig, on_signal, sig)
        log.info("api stopping", extra={"signal": (await received).name})
        await running.close()  # finishes requests in flight, then closes
    finally:
        await redis_client.aclose()
    log.info("api stopped")


COMMAND: Final = Command("api", "serve the HTTP producer API for its queue (token from env "
                         "ANTRE_API_TOKEN)", configure, run)
