"""A small HTTP server for /metrics and /healthz beside the worker (aiohttp-free: the worker
image stays lean, so this uses asyncio streams)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.exposition import CONTENT_TYPE_LATEST


@dataclass
class MetricsServer:
    server: asyncio.base_events.Server
    port: int

    async def cleanup(self) -> None:
        self.server.close()
        await self.server.wait_closed()


async def serve_metrics(registry: CollectorRegistry, *, port: int, host: str = "0.0.0.0",
                        healthy: Callable[[], bool]) -> MetricsServer:
    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            request_line = await asyncio.wait_for(reader.readline(), 5)
            while (await asyncio.wait_for(reader.readline(), 5)) not in (b"\r\n", b"\n", b""):
                pass
            parts = request_line.decode("latin-1").split()
            path = parts[1] if len(parts) > 1 else "/"
            if path.startswith("/metrics"):
                status, ctype, body = "200 OK", CONTENT_TYPE_LATEST, generate_latest(registry)
            elif path.startswith("/healthz"):
                ok = healthy()
                status = "200 OK" if ok else "503 Service Unavailable"
                ctype, body = "text/plain", b"ok\n" if ok else b"unhealthy\n"
            else:
                status, ctype, body = "404 Not Found", "text/plain", b"not found\n"
            writer.write(f"HTTP/1.1 {status}\r\nContent-Type: {ctype}\r\nContent-Length: "
                         f"{len(body)}\r\nConnection: close\r\n\r\n".encode() + body)
            await writer.drain()
        except (TimeoutError, ConnectionError):
            pass
        finally:
            writer.close()

    server = await asyncio.start_server(handle, host, port)
    actual_port = server.sockets[0].getsockname()[1]
    return MetricsServer(server=server, port=actual_port)
