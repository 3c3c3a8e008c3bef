"""The HTTP endpoint of a process's Prometheus metrics: ``/metrics`` from a registry and, when
given a health check, ``/healthz`` for the liveness probe.

aiohttp (a core dependency; the API is served with it too) and prometheus_client's aiohttp
handler, which also answers OpenMetrics and gzip when a scraper asks. The worker
(``--metrics-port``) and the operator serve their metrics through here.
"""

from __future__ import annotations

import socket
from collections.abc import Callable
from dataclasses import dataclass

from aiohttp import web
from prometheus_client import CollectorRegistry
from prometheus_client.aiohttp import make_aiohttp_handler


@dataclass
class MetricsServer:
    runner: web.AppRunner
    #: The port actually bound (the one asked for, or the one the OS chose for port 0).
    port: int

    async def cleanup(self) -> None:
        await self.runner.cleanup()


async def serve_metrics(registry: CollectorRegistry, *, port: int, host: str = "0.0.0.0",
                        health: Callable[[], tuple[bool, str]] | None = None,
                        listener: socket.socket | None = None) -> MetricsServer:
    """Starts serving on the running event loop; ``cleanup()`` stops it. ``health`` answers
    /healthz: whether the process is healthy (200, else 503) and a line saying why.
    ``listener``: a socket already bound and listening, served instead of host and port."""
    app = web.Application()
    app.router.add_get("/metrics", make_aiohttp_handler(registry))
    if health is not None:
        check = health

        async def healthz(_: web.Request) -> web.Response:
            ok, detail = check()
            return web.Response(status=200 if ok else 503, text=detail + "\n")

        app.router.add_get("/healthz", healthz)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site: web.BaseSite = (web.SockSite(runner, listener) if listener is not None
                          else web.TCPSite(runner, host, port))
    try:
        await site.start()
    except BaseException:
        await runner.cleanup()
        raise
    bound = runner.addresses[0][1] if runner.addresses else port
    return MetricsServer(runner=runner, port=int(bound))
