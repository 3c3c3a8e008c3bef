"""Servers that pass for Redis and answer as no Redis running antre's scripts would: the
hostile Redis of a JobQueue author, for the operator's reader and reconciler tests; and the
measure of the memory they make the test's process take."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator

#: What the servers answer to the commands of a connection's handshake, as Redis 7 does.
HANDSHAKE: dict[bytes, bytes] = {
    b"HELLO": b"%3\r\n$6\r\nserver\r\n$5\r\nredis\r\n$7\r\nversion\r\n$5\r\n7.0.0\r\n"
              b"$5\r\nproto\r\n:3\r\n",
    b"PING": b"+PONG\r\n", b"CLIENT": b"+OK\r\n", b"SELECT": b"+OK\r\n"}


async def _header(reader: asyncio.StreamReader) -> int:
    """The number of a ``*N`` or ``$N`` line. A client gone (the reader refusing a reply hangs
    up, sometimes in the middle of the next command) ends the connection as ConnectionError,
    which the servers expect, not a ValueError out of ``int(b"")`` in their task."""
    line = await reader.readline()
    if not line.endswith(b"\r\n"):
        raise ConnectionResetError("the client went away")
    return int(line[1:])


async def read_command(reader: asyncio.StreamReader) -> list[bytes]:
    """The next command a client sends, its words upper-cased."""
    count = await _header(reader)
    words = []
    for _ in range(count):
        size = await _header(reader)
        words.append((await reader.readexactly(size + 2))[:-2].upper())
    return words


@contextlib.asynccontextmanager
async def flooding_server(reply_bytes: int, answers: dict[bytes, bytes] | None = None, *,
                          hung_up: asyncio.Event | None = None,
                          accepted: list[int] | None = None,
                          heard: list[tuple[int, bytes]] | None = None,
                          ) -> AsyncIterator[tuple[int, list[int]]]:
    """A server that speaks Redis for the handshake (HELLO, CLIENT), answers the commands of
    ``answers`` as given, then any other command with one bulk string of ``reply_bytes``, sent
    as long as its client reads. Yields its port and a list that receives the bytes it managed
    to send. ``hung_up``, if given, is set whenever its last open connection has ended (the
    client gone): ``sent`` then holds all that the server got out to it. ``accepted``, if given,
    receives the server's port for each connection it accepts, and ``heard`` its port and the
    command's name for each command beyond the handshake (one list may serve several servers)."""
    sent: list[int] = []
    connections = 0

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        nonlocal connections
        connections += 1
        if accepted is not None:
            accepted.append(writer.get_extra_info("sockname")[1])
        try:
            await serve(reader, writer)
        finally:
            connections -= 1
            if hung_up is not None and connections == 0:
                hung_up.set()

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        port = writer.get_extra_info("sockname")[1]
        with contextlib.suppress(ConnectionError, asyncio.IncompleteReadError):
            while True:
                words = await read_command(reader)
                if heard is not None and words[0] not in HANDSHAKE:
                    heard.append((port, words[0]))
                if words[0] in HANDSHAKE:
                    writer.write(HANDSHAKE[words[0]])
                elif words[0] in (answers or {}):
                    writer.write((answers or {})[words[0]])
                else:
                    writer.write(b"$%d\r\n" % reply_bytes)
                    chunk, left = b"0" * (1 << 20), reply_bytes
                    while left > 0:
                        writer.write(chunk[:left])
                        left -= len(chunk)
                        await writer.drain()
                        sent.append(len(chunk[:left + len(chunk)]))
                    writer.write(b"\r\n")
                await writer.drain()
        writer.close()

    server = await asyncio.start_server(handle, "127.0.0.1", 0)
    try:
        yield server.sockets[0].getsockname()[1], sent
    finally:
        server.close()


def bulk(data: bytes) -> bytes:
    return b"$%d\r\n%s\r\n" % (len(data), data)


def depth_reply(*, ready: bytes = b"0", oldest_age_ms: bytes = b"-1") -> bytes:
    """The depth script's reply (now, ready, processing, expired, scheduled, due, dead, oldest
    ready age, workers, counters), with ``ready`` and the age as given (bulk strings)."""
    items = [b":1\r\n", bulk(ready), *[b":0\r\n"] * 5, bulk(oldest_age_ms), b":0\r\n",
             b"*0\r\n"]
    return b"*%d\r\n" % len(items) + b"".join(items)


ZEROS: bytes = b"0" * (64 * 1024)


@contextlib.asynccontextmanager
async def stalling_server(body_bytes: int, info: bytes | None = None,
                          ) -> AsyncIterator[tuple[int, list[int]]]:
    """A server that speaks Redis for the handshake, answers INFO with ``info`` (if given) and
    any other command with the start of a bulk string longer than ``body_bytes``: it sends
    ``body_bytes`` of it, as fast as its client reads, and then never the rest. Yields its port
    and a list that gets one item per answer it is done with: sent whole, or cut short by the
    client."""
    done: list[int] = []

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        with contextlib.suppress(ConnectionError, asyncio.IncompleteReadError, ValueError):
            while True:
                words = await read_command(reader)
                if words[0] in HANDSHAKE:
                    writer.write(HANDSHAKE[words[0]])
                elif words[0] == b"INFO" and info is not None:
                    await send(writer, [b"$%d\r\n" % len(info), info, b"\r\n"])
                else:
                    await send(writer, [b"$%d\r\n" % (body_bytes + 10),
                                        *[ZEROS] * (body_bytes // len(ZEROS)),
                                        ZEROS[:body_bytes % len(ZEROS)]])
                await writer.drain()
        writer.close()

    async def send(writer: asyncio.StreamWriter, parts: list[bytes]) -> None:
        """In pieces, each once its client read the last: the server holds little of it (the
        memory the tests measure is the client's)."""
        try:
            for part in parts:
                for start in range(0, len(part), len(ZEROS)):
                    writer.write(part[start:start + len(ZEROS)])
                    await writer.drain()
        finally:
            done.append(sum(map(len, parts)))

    server = await asyncio.start_server(serve, "127.0.0.1", 0)
    try:
        yield server.sockets[0].getsockname()[1], done
    finally:
        server.close()


#: Array headers never followed by their elements: 9 KB for which hiredis reserves room for 16
#: million (69 MiB were measured).
NESTED: bytes = b"*16000\r\n" * 1000


def peak_memory_reset() -> None:
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")


def memory_mib(peak: bool = False) -> float:
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) / 1024 for line in f
                    if line.startswith("VmHWM:" if peak else "VmRSS:"))
