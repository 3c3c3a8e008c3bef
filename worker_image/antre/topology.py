"""The Redis servers behind a client: which one is the primary (found through which Sentinel
service, if any), its replicas and how far each lags. Read for ``antre inspect``, ``doctor``
and ``top`` by :mod:`antre.snapshots`; judged by :mod:`antre.findings`.

:func:`from_info` is pure (``INFO replication`` in, :class:`Topology` out); :func:`read` and
:func:`read_async` add the one round trip, plus the Sentinels' answer for a ``redis+sentinel://``
client. A Redis Cluster has a primary per shard and gets no topology here.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from antre import connection, sentinel


@dataclass(frozen=True, slots=True)
class Replica:
    address: str
    #: Replication state the primary reports: ``online`` once synced (``wait_bgsave``,
    #: ``send_bulk`` during a full sync).
    state: str
    #: Seconds since the replica last acknowledged the stream (it does every second).
    lag_s: int
    #: Bytes of the stream the replica had not acknowledged at its last acknowledgement.
    behind_bytes: int


@dataclass(frozen=True, slots=True)
class Topology:
    #: The server the client writes to, ``host:port``.
    primary: str
    #: The Sentinel service the primary was found under; None for a direct URL.
    sentinel_service: str | None
    #: What that server says it is: ``master``, or ``slave`` (a replica: writes fail).
    role: str
    replicas: tuple[Replica, ...] = ()

    @property
    def online(self) -> int:
        return sum(1 for replica in self.replicas if replica.state == "online")

    def describe(self) -> str:
        where = f"primary {self.primary}" + (
            f" (Sentinel service {self.sentinel_service!r})" if self.sentinel_service else "")
        if self.role != "master":
            where = f"{self.primary} (a {self.role}, not a primary)"
        if not self.replicas:
            return f"{where}; no replica connected"
        shown = "; ".join(f"{r.address} {r.state}, lag {r.lag_s} s, {r.behind_bytes} bytes behind"
                          for r in self.replicas)
        return f"{where}; {len(self.replicas)} replica(s): {shown}"


def from_info(info: dict[str, Any], *, primary: str, sentinel_service: str | None) -> Topology:
    """The topology from the primary's ``INFO replication`` (as redis-py parses it)."""
    role = str(info.get("role", "?"))
    offset = _int(info.get("master_repl_offset"))
    replicas = []
    for key, value in sorted(info.items()):
        if key.startswith("slave") and key[5:].isdigit() and isinstance(value, dict):
            replicas.append(Replica(
                address=f"{value.get('ip', '?')}:{value.get('port', '?')}",
                state=str(value.get("state", "?")), lag_s=_int(value.get("lag")),
                behind_bytes=max(offset - _int(value.get("offset")), 0)))
    return Topology(primary=primary, sentinel_service=sentinel_service, role=role,
                    replicas=tuple(replicas))


def _int(value: Any) -> int:
    try:
        return int(value)
    except (TypeError, ValueError):
        return 0


def _direct_address(client: Any) -> str:
    kwargs = client.connection_pool.connection_kwargs
    if kwargs.get("path"):
        return f"unix:{kwargs['path']}"
    return f"{kwargs.get('host', '?')}:{kwargs.get('port', '?')}"


def read(client: Any) -> Topology | None:
    """The topology behind a sync client; None for a Redis Cluster."""
    if connection.is_cluster_client(client):
        return None
    service = None
    if isinstance(client, sentinel.SentinelRedis):
        service = client.service
        host, port = client.primary_address()
        primary = f"{host}:{port}"
    else:
        primary = _direct_address(client)
    return from_info(client.info("replication"), primary=primary, sentinel_service=service)


async def read_async(client: Any) -> Topology | None:
    """:func:`read` on an asyncio client."""
    if connection.is_cluster_client(client):
        return None
    service = None
    if isinstance(client, sentinel.AsyncSentinelRedis):
        service = client.service
        host, port = await client.primary_address()
        primary = f"{host}:{port}"
    else:
        primary = _direct_address(client)
    return from_info(await client.info("replication"), primary=primary,
                     sentinel_service=service)
