"""A real three-node Redis Cluster for the tests: ``redis-server`` processes in cluster mode on
free loopback ports (each with its cluster bus port free too), joined by ``redis-cli --cluster
create``, without replicas."""

from __future__ import annotations

import contextlib
import random
import socket
import subprocess
from collections.abc import Iterator

import redis
from redis_servers import RedisServer, wait_until


class Cluster:
    def __init__(self, nodes: list[RedisServer]) -> None:
        self.nodes = nodes

    @property
    def url(self) -> str:
        return f"redis+cluster://127.0.0.1:{self.nodes[0].port}"

    def owner_port(self, key: str) -> int:
        """The port of the primary serving ``key``'s slot."""
        with self.owner(key) as owner:
            return int(owner.connection_pool.connection_kwargs["port"])

    @contextlib.contextmanager
    def evicting(self, port: int) -> Iterator[None]:
        """maxmemory-policy allkeys-lru on the node at ``port`` alone (noeviction again after)."""
        with redis.Redis(port=port) as node:
            node.config_set("maxmemory-policy", "allkeys-lru")
            try:
                yield
            finally:
                node.config_set("maxmemory-policy", "noeviction")

    def owner(self, key: str) -> redis.Redis:
        """A plain client on the primary serving ``key``'s slot."""
        with redis.Redis(port=self.nodes[0].port, decode_responses=True) as seed:
            slot = int(seed.execute_command("CLUSTER", "KEYSLOT", key))
            for start, end, primary, *_ in seed.execute_command("CLUSTER", "SLOTS"):
                if start <= slot <= end:
                    return redis.Redis(host="127.0.0.1", port=int(primary[1]), decode_responses=True)
        raise AssertionError(f"no node serves slot {slot}")


def _cluster_ok(port: int) -> bool:
    with redis.Redis(port=port, decode_responses=True) as client:
        info = client.execute_command("CLUSTER", "INFO")
    text = info if isinstance(info, str) else str(info)
    return "cluster_state:ok" in text and "cluster_known_nodes:3" in text


def _bindable(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
        return True


def cluster_port() -> int:
    """A free port whose cluster bus port (port + 10000) is valid and free too: ephemeral ports
    from ``free_port`` are often above 55535."""
    for _ in range(200):
        port = random.randint(20000, 45000)
        if _bindable(port) and _bindable(port + 10000):
            return port
    raise AssertionError("no free port pair for a cluster node")


@contextlib.contextmanager
def redis_cluster() -> Iterator[Cluster]:
    """Three primaries sharing the 16,384 slots, each answering ``cluster_state:ok``."""
    nodes: list[RedisServer] = []
    try:
        for _ in range(3):
            node = RedisServer("--cluster-enabled", "yes", "--cluster-node-timeout", "5000",
                               port=cluster_port())
            node.args += ["--cluster-config-file", str(node.dir / "nodes.conf")]
            nodes.append(node.start())
        subprocess.run(
            ["redis-cli", "--cluster", "create", *(f"127.0.0.1:{n.port}" for n in nodes),
             "--cluster-replicas", "0", "--cluster-yes"],
            check=True, capture_output=True, timeout=60)
        for node in nodes:
            wait_until(lambda port=node.port: _cluster_ok(port), timeout_s=30,
                       message=f"cluster_state:ok on node {node.port}")
        yield Cluster(nodes)
    finally:
        for node in nodes:
            node.stop()
