"""A TCP proxy in front of a redis-server that loses or delays a reply: the command runs in
Redis, and the connection that sent it is cut before the reply reaches the client (a network
fault, or a pod's connection reset, at the worst moment), or gets the reply late (a stalled
link, a client paused or starved of CPU while it was on its way).

Once armed with :meth:`ReplyCutter.hold_replies_after`, the next connection that sends bytes
holding the marker (a script's SHA in its EVALSHA) gets no more bytes from Redis; the test waits
until Redis shows that the command ran, then :meth:`ReplyCutter.cut` closes that connection
with the held replies unsent, or :meth:`ReplyCutter.deliver` sends them all at once and relays
that connection untouched from then on. Every other connection is relayed untouched.
"""

from __future__ import annotations

import asyncio
import contextlib


class _Link:
    def __init__(self, client: asyncio.StreamWriter, server: asyncio.StreamWriter) -> None:
        self.client, self.server = client, server
        self.holding = False
        #: Bytes from Redis not relayed while holding, in order.
        self.held: list[bytes] = []

    def close(self) -> None:
        for writer in (self.client, self.server):
            with contextlib.suppress(Exception):
                writer.transport.abort()


class ReplyCutter:
    def __init__(self, redis_port: int) -> None:
        self.redis_port = redis_port
        self.port = 0
        self._server: asyncio.Server | None = None
        self._marker: bytes | None = None
        self._held: _Link | None = None
        self._links: set[_Link] = set()
        #: Set when a connection sent the marker and its replies are being held.
        self.holding = asyncio.Event()

    async def __aenter__(self) -> ReplyCutter:
        self._server = await asyncio.start_server(self._relay, "127.0.0.1", 0)
        self.port = self._server.sockets[0].getsockname()[1]
        return self

    async def __aexit__(self, *exc: object) -> None:
        assert self._server is not None
        self._server.close()
        for link in list(self._links):
            link.close()

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def hold_replies_after(self, marker: bytes) -> None:
        self._marker = marker

    def cut(self) -> None:
        """Closes the held connection: the replies Redis sent it are lost."""
        assert self._held is not None, "no connection sent the marker"
        self._held.close()

    def deliver(self) -> None:
        """Sends the held connection the replies Redis sent it, late, and stops holding."""
        assert self._held is not None, "no connection sent the marker"
        link = self._held
        # Written before relaying resumes (one loop, no await between): the replies keep
        # their order.
        link.client.write(b"".join(link.held))
        link.held.clear()
        link.holding = False

    async def _relay(self, client_reader: asyncio.StreamReader,
                     client_writer: asyncio.StreamWriter) -> None:
        server_reader, server_writer = await asyncio.open_connection("127.0.0.1", self.redis_port)
        link = _Link(client_writer, server_writer)
        self._links.add(link)

        async def upstream() -> None:
            tail = b""
            while data := await client_reader.read(65536):
                seen = tail + data
                if self._marker is not None and self._marker in seen:
                    self._marker, self._held, link.holding = None, link, True
                    self.holding.set()
                tail = seen[-256:]
                server_writer.write(data)
                await server_writer.drain()

        async def downstream() -> None:
            while data := await server_reader.read(65536):
                if link.holding:
                    link.held.append(data)  # cut() drops it, deliver() sends it
                    continue
                client_writer.write(data)
                await client_writer.drain()

        try:
            await asyncio.gather(upstream(), downstream())
        except (ConnectionError, OSError):
            pass
        finally:
            link.close()
            self._links.discard(link)
