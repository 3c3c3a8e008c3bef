"""A real Redis Sentinel group for the tests: one primary, two replicas and three Sentinels, all
``redis-server`` / ``redis-sentinel`` processes on free loopback ports, started and killed by pid.

Sentinel's timings are cut to what a loaded two-core machine tolerates (:data:`DOWN_AFTER_MS`,
:data:`FAILOVER_TIMEOUT_MS`), and the Sentinels start knowing each other and the replicas (the
``known-sentinel`` / ``known-replica`` lines Sentinel itself writes on a config rewrite), so a
group is ready in a fraction of a second instead of after the first hello and INFO rounds.
"""

from __future__ import annotations

import contextlib
import secrets
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import redis
from redis_servers import RedisServer, free_port, wait_until

SERVICE = "antre"
#: How long a silent primary takes to be judged down. Lower makes failovers faster and spurious
#: failovers likelier: at 500 ms a loaded two-core machine saw a freshly promoted primary judged
#: down and replaced within a second.
DOWN_AFTER_MS = 1000
#: Sentinel's bound on each phase of a failover (and twice it between two tries of one primary).
FAILOVER_TIMEOUT_MS = 2000
#: Flags Sentinel shows for an instance it may route to.
_BAD_FLAGS = {"s_down", "o_down", "disconnected", "failover_in_progress", "promoted",
              "reconf_sent", "reconf_inprog"}
#: Server options: full syncs start at once (Redis waits 5 s by default for more replicas).
SERVER_ARGS = ("--repl-diskless-sync", "yes", "--repl-diskless-sync-delay", "0",
               "--maxmemory-policy", "noeviction")


class SentinelProcess:
    """One ``redis-sentinel`` process with its own port and config file."""

    def __init__(self, directory: Path, *, port: int, my_id: str) -> None:
        self.port = port
        self.my_id = my_id
        self.config = directory / f"sentinel-{port}.conf"
        self.log = directory / f"sentinel-{port}.log"
        self.process: subprocess.Popen[bytes] | None = None
        #: The Sentinel's own password (``requirepass``), if it has one.
        self.password: str | None = None

    def start(self, *, primary_port: int, replica_ports: list[int],
              peers: list[SentinelProcess], extra_lines: tuple[str, ...] = ()) -> None:
        lines = [
            f"port {self.port}", "bind 127.0.0.1", "daemonize no", "protected-mode no",
            f"dir {self.config.parent}", f"logfile {self.log}", f"sentinel myid {self.my_id}",
            f"sentinel monitor {SERVICE} 127.0.0.1 {primary_port} 2",
            f"sentinel down-after-milliseconds {SERVICE} {DOWN_AFTER_MS}",
            f"sentinel failover-timeout {SERVICE} {FAILOVER_TIMEOUT_MS}",
            f"sentinel parallel-syncs {SERVICE} 2",
            *(f"sentinel known-replica {SERVICE} 127.0.0.1 {port}" for port in replica_ports),
            *(f"sentinel known-sentinel {SERVICE} 127.0.0.1 {peer.port} {peer.my_id}"
              for peer in peers if peer is not self),
            *extra_lines,
        ]
        self.config.write_text("\n".join(lines) + "\n")
        for line in extra_lines:
            if line.startswith("requirepass "):
                self.password = line.split(" ", 1)[1]
        binary = shutil.which("redis-sentinel")
        if binary is None:
            raise RuntimeError("redis-sentinel is not on PATH; the HA tests need a real Sentinel "
                               "(Debian: apt-get install redis-sentinel)")
        self.process = subprocess.Popen([binary, str(self.config)], stdout=subprocess.DEVNULL,
                                        stderr=subprocess.DEVNULL)
        wait_until(self._answers, timeout_s=10, message=f"redis-sentinel on port {self.port}")

    def _answers(self) -> bool:
        with self.client() as client:
            return bool(client.ping())

    def client(self, password: str | None = None) -> redis.Redis:
        return redis.Redis(port=self.port, password=password or self.password,
                           decode_responses=True, socket_timeout=1.0)

    def kill(self) -> None:
        if self.process is not None:
            self.process.send_signal(signal.SIGKILL)
            self.process.wait(timeout=10)
            self.process = None


@dataclass(frozen=True)
class Failover:
    """One failover the group went through."""

    killed_port: int
    promoted_port: int
    killed_at: float
    """time.monotonic() of the kill -9."""
    promoted_after_s: float
    """Until every Sentinel named the new primary and it answered as one."""


class SentinelGroup:
    """Three redis-servers (a primary and two replicas) and three Sentinels watching them."""

    def __init__(self) -> None:
        self.dir = Path(tempfile.mkdtemp(prefix="antre-sentinel-"))
        self.servers: dict[int, RedisServer] = {}
        self.sentinels = [SentinelProcess(self.dir, port=free_port(), my_id=secrets.token_hex(20))
                          for _ in range(3)]
        self.failovers: list[Failover] = []

    # -- lifecycle ---------------------------------------------------------------------------

    def start(self) -> SentinelGroup:
        primary = RedisServer(*SERVER_ARGS).start()
        self.servers[primary.port] = primary
        for _ in range(2):
            replica = RedisServer(*SERVER_ARGS, "--replicaof", "127.0.0.1",
                                  str(primary.port)).start()
            self.servers[replica.port] = replica
        replica_ports = [port for port in self.servers if port != primary.port]
        for sentinel in self.sentinels:
            sentinel.start(primary_port=primary.port, replica_ports=replica_ports,
                           peers=self.sentinels)
        self.wait_healthy()
        return self

    def stop(self) -> None:
        for sentinel in self.sentinels:
            with contextlib.suppress(Exception):
                sentinel.kill()
        for server in self.servers.values():
            with contextlib.suppress(Exception):
                server.stop()
        shutil.rmtree(self.dir, ignore_errors=True)

    # -- addresses ---------------------------------------------------------------------------

    @property
    def sentinel_hosts(self) -> str:
        return ",".join(f"127.0.0.1:{sentinel.port}" for sentinel in self.sentinels)

    def url(self, *, db: int = 0, query: str = "") -> str:
        """``redis+sentinel://`` naming all three Sentinels and the service."""
        return f"redis+sentinel://{self.sentinel_hosts}/{SERVICE}/{db}" + (
            f"?{query}" if query else "")

    def primary_port(self) -> int:
        """The primary every Sentinel names (fails if they disagree or none answers)."""
        views = set()
        for sentinel in self.sentinels:
            with sentinel.client() as client:
                state = client.sentinel_master(SERVICE)
            views.add(int(state["port"]))
        if len(views) != 1:
            raise AssertionError(f"the Sentinels disagree on the primary: {sorted(views)}")
        return views.pop()

    def primary_client(self) -> redis.Redis:
        """A plain client on the current primary (for assertions, not through Sentinel)."""
        return redis.Redis(port=self.primary_port(), decode_responses=True)

    def live_ports(self) -> list[int]:
        return [port for port, server in self.servers.items() if server.process is not None]

    # -- faults ------------------------------------------------------------------------------

    def kill_primary(self) -> tuple[int, float]:
        """kill -9 of the primary; returns its port and the monotonic time of the kill."""
        port = self.primary_port()
        self.servers[port].kill()
        return port, time.monotonic()

    def wait_promoted(self, old_port: int, *, timeout_s: float = 30.0) -> int:
        """Waits until every Sentinel names a primary other than ``old_port`` and that server
        answers as a primary; returns its port."""
        def promoted() -> int | None:
            port = self.primary_port()
            if port == old_port:
                return None
            with redis.Redis(port=port, decode_responses=True, socket_timeout=1.0) as client:
                role = client.info("replication")["role"]
            return port if role == "master" else None
        return int(wait_until(promoted, timeout_s=timeout_s, interval_s=0.02,  # type: ignore[arg-type]
                              message=f"a primary other than port {old_port}"))

    def restart_as_replica(self, port: int, *, primary_port: int) -> None:
        """Starts the killed server again, empty, as a replica of the primary (as a restarted
        pod of a StatefulSet would, told by Sentinel where the primary is)."""
        self.servers[port].stop()
        self.servers[port] = RedisServer(*SERVER_ARGS, "--replicaof", "127.0.0.1",
                                         str(primary_port), port=port).start()

    def fail_over(self) -> Failover:
        """kill -9 of the primary, then waits for Sentinel to promote a replica; the killed
        server comes back as a replica and the group is healthy again before this returns."""
        old_port, killed_at = self.kill_primary()
        new_port = self.wait_promoted(old_port)
        failover = Failover(killed_port=old_port, promoted_port=new_port, killed_at=killed_at,
                            promoted_after_s=time.monotonic() - killed_at)
        self.failovers.append(failover)
        self.restart_as_replica(old_port, primary_port=new_port)
        self.wait_healthy()
        return failover

    # -- health ------------------------------------------------------------------------------

    def wait_healthy(self, *, timeout_s: float = 40.0) -> int:
        """Until every Sentinel names one primary, which has every other live server online as
        its replica, and sees those replicas (up, following it) and the two other Sentinels:
        ready for the next failover. Returns the primary's port (a failover Sentinel started
        on its own on a stalled machine is ridden out, not failed on)."""
        deadline = time.monotonic() + timeout_s
        while True:
            try:
                primary_port = self.primary_port()
            except (AssertionError, redis.RedisError) as exc:
                problem: str | None = str(exc)
            else:
                problem = self._health_problem(primary_port)
                if problem is None:
                    return primary_port
            if time.monotonic() > deadline:
                raise AssertionError(f"the Sentinel group is not healthy after {timeout_s}s: "
                                     f"{problem}\n{self.log_tail()}")
            time.sleep(0.05)

    def log_tail(self, lines: int = 25) -> str:
        """The last lines of every Sentinel's log, for a failure message."""
        parts = []
        for sentinel in self.sentinels:
            text = sentinel.log.read_text(errors="replace") if sentinel.log.exists() else ""
            parts.append(f"--- Sentinel {sentinel.port}\n" + "\n".join(text.splitlines()[-lines:]))
        return "\n".join(parts)

    def _health_problem(self, primary_port: int) -> str | None:
        """What keeps the group from being healthy, or None."""
        replica_ports = sorted(port for port in self.live_ports() if port != primary_port)
        try:
            with redis.Redis(port=primary_port, decode_responses=True,
                             socket_timeout=1.0) as client:
                info = client.info("replication")
            online = sorted(int(value["port"]) for key, value in info.items()
                            if key.startswith("slave") and isinstance(value, dict)
                            and value.get("state") == "online")
            if info["role"] != "master" or online != replica_ports:
                return f"port {primary_port} is {info['role']} with replicas {online} online"
            for sentinel in self.sentinels:
                with sentinel.client() as client:
                    master = client.sentinel_master(SERVICE)
                    replicas = client.sentinel_slaves(SERVICE)
                where = f"Sentinel {sentinel.port}"
                if int(master["port"]) != primary_port or _flags(master) & _BAD_FLAGS:
                    return f"{where} sees primary {master['port']} flags {master['flags']}"
                if int(master["num-other-sentinels"]) != len(self.sentinels) - 1:
                    return f"{where} knows {master['num-other-sentinels']} other Sentinels"
                following = sorted(int(r["port"]) for r in replicas
                                   if not _flags(r) & _BAD_FLAGS
                                   and r.get("master-link-status") == "ok"
                                   and int(r.get("master-port", 0)) == primary_port)
                if following != replica_ports:
                    seen = [(r["port"], r["flags"], r.get("master-port")) for r in replicas]
                    return f"{where} sees replicas {seen}"
        except redis.RedisError as exc:
            return repr(exc)
        return None


def _flags(state: dict[str, Any]) -> set[str]:
    """Sentinel's flags of an instance ("master", "s_down", ...), a string in RESP2."""
    flags = state.get("flags", "")
    return set(flags.split(",")) if isinstance(flags, str) else set(flags)


@contextlib.contextmanager
def sentinel_group() -> Iterator[SentinelGroup]:
    group = SentinelGroup()
    try:
        yield group.start()
    finally:
        group.stop()
