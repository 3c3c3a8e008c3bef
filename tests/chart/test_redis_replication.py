"""The optional Redis as a primary with replicas and Sentinels (``redis.architecture:
replication``): what the chart renders, and its start scripts run for real.

Aspects: replication.replicas pods, each with a redis and a sentinel container started by the
ConfigMap's scripts, the peers and quorum in their environment; a headless Service for the
pods' names and a Service with the Sentinel port only; a PodDisruptionBudget of one; the
Secret's redis-url is a redis+sentinel:// URL naming every Sentinel, and the example JobQueue
uses it with durableReplicas 1.

Then the rendered scripts start three "pods" here (redis-server and redis-sentinel processes
on loopback ports, with the environment the pods get): pod 0 becomes the primary and the others
its replicas; antre enqueues through the chart's URL form; pod 0 is killed (kill -9 of both its
processes) and the Sentinels promote a replica; pod 0 started again by its scripts comes back
as a replica of the new primary; a second failover follows, and no confirmed job is lost. And
pod 0 restarted at a chosen moment of the Sentinels' failover (their pub/sub events), when they
still name it or disagree, comes back as a replica, never as a second primary; the group heals
and fails over again.
"""

from __future__ import annotations

import base64
import contextlib
import os
import shutil
import signal
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest
import redis
from antre import Queue, QueueSettings, connection
from redis_servers import free_port, wait_until

from .helm_runner import FULLNAME, NAMESPACE, Rendering

Render = Callable[[dict[str, Any]], Rendering]
REDIS = f"{FULLNAME}-redis"
REPLICATED = {"redis": {"enabled": True, "architecture": "replication"},
              "exampleJobQueue": {"enabled": True}}
PASSWORD = "chart-test-password"


def test_pods_services_and_budget(rendered: Render) -> None:
    rendering = rendered(REPLICATED)
    statefulset = rendering.one("StatefulSet", REDIS)
    assert statefulset["spec"]["replicas"] == 3
    assert statefulset["spec"]["serviceName"] == f"{REDIS}-headless"
    containers = {c["name"]: c for c in statefulset["spec"]["template"]["spec"]["containers"]}
    assert containers["redis"]["command"] == ["sh", "/scripts/start-redis.sh"]
    assert containers["sentinel"]["command"] == ["sh", "/scripts/start-sentinel.sh"]
    env = {e["name"]: e.get("value") for e in containers["sentinel"]["env"]}
    headless = f"{REDIS}-headless.{NAMESPACE}.svc"
    assert env["PEERS"].split() == [f"{REDIS}-{i}.{headless}:6379:26379" for i in range(3)]
    assert env["SELF_HOST"] == f"$(POD_NAME).{headless}"
    assert (env["QUORUM"], env["MASTER_SET"]) == ("2", "mymaster")
    services = {s["metadata"]["name"]: s["spec"] for s in rendering.of_kind("Service")
                if s["metadata"]["labels"]["app.kubernetes.io/component"] == "redis"}
    assert services[f"{REDIS}-headless"]["clusterIP"] == "None"
    assert services[f"{REDIS}-headless"]["publishNotReadyAddresses"] is True
    # The plain Service has no Redis port: it would reach replicas, which refuse writes.
    assert [p["port"] for p in services[REDIS]["ports"]] == [26379]
    assert rendering.one("PodDisruptionBudget", REDIS)["spec"]["maxUnavailable"] == 1


def test_the_url_names_every_sentinel_and_the_example_writes_durably(rendered: Render) -> None:
    rendering = rendered(REPLICATED)
    secret = rendering.one("Secret", REDIS)
    password = base64.b64decode(secret["data"]["redis-password"]).decode()
    url = base64.b64decode(secret["data"]["redis-url"]).decode()
    headless = f"{REDIS}-headless.{NAMESPACE}.svc"
    sentinels = ",".join(f"{REDIS}-{i}.{headless}:26379" for i in range(3))
    assert url == (f"redis+sentinel://:{password}@{sentinels}/mymaster/0"
                   f"?sentinel_password={password}")
    example = rendering.one("JobQueue")["spec"]["redis"]
    assert example == {"urlSecretRef": {"name": REDIS, "key": "redis-url"}, "durableReplicas": 1}
    assert urlsplit(url).scheme == "redis+sentinel"


def test_five_pods_need_three_sentinels(rendered: Render) -> None:
    statefulset = rendered({"redis": {"enabled": True, "architecture": "replication",
                                      "replication": {"replicas": 5}}}).one("StatefulSet", REDIS)
    assert statefulset["spec"]["replicas"] == 5
    env = {e["name"]: e.get("value")
           for e in statefulset["spec"]["template"]["spec"]["containers"][1]["env"]}
    assert env["QUORUM"] == "3" and len(env["PEERS"].split()) == 5


# -- the start scripts, run for real ---------------------------------------------------------------

class Pod:
    """One pod of the StatefulSet: its redis-server and redis-sentinel, started by the chart's
    scripts with the environment the pod gets (ports and paths moved to this machine)."""

    def __init__(self, index: int, workdir: Path, scripts: Path, peers: list[tuple[int, int]]) -> None:
        self.index = index
        self.redis_port, self.sentinel_port = peers[index]
        self.workdir = workdir / f"pod-{index}"
        self.env = {
            **os.environ, "SCRIPTS": str(scripts),
            "REDIS_PASSWORD": PASSWORD, "REDISCLI_AUTH": PASSWORD, "SELF_HOST": "127.0.0.1",
            "PEERS": " ".join(f"127.0.0.1:{r}:{s}" for r, s in peers), "MASTER_SET": "mymaster",
            "QUORUM": "2", "DOWN_AFTER_MS": "1000", "FAILOVER_TIMEOUT_MS": "2000",
            "REDIS_PORT": str(self.redis_port), "SENTINEL_PORT": str(self.sentinel_port),
        }
        self.processes: list[subprocess.Popen[bytes]] = []

    def start(self, *, keep_data: bool = False) -> None:
        """Starts the pod anew: its Sentinel's directory is an emptyDir, and so is its data
        unless ``keep_data`` (redis.persistence.enabled: the volume outlives the pod)."""
        for name in ("sentinel", *(() if keep_data else ("data",))):
            shutil.rmtree(self.workdir / name, ignore_errors=True)
            (self.workdir / name).mkdir(parents=True)
        scripts = Path(self.env["SCRIPTS"])
        # The pod's own copy, as every container start mounts the ConfigMap anew (read-only):
        # a shared file would take the CONFIG REWRITE that follows Sentinel's REPLICAOF, and a
        # pod started as the primary would then replicate whichever server that named.
        config = shutil.copy(scripts / "redis.conf", self.workdir / "redis.conf")
        env = {**self.env, "DATA_DIR": str(self.workdir / "data"),
               "SENTINEL_DIR": str(self.workdir / "sentinel"), "REDIS_CONF": str(config)}
        for script, port in (("start-redis.sh", self.redis_port),
                             ("start-sentinel.sh", self.sentinel_port)):
            with (self.workdir / f"{script}.log").open("ab") as log:  # earlier lives kept
                self.processes.append(subprocess.Popen(
                    ["sh", str(scripts / script)], env=env, stdout=log, stderr=subprocess.STDOUT,
                    cwd=self.workdir))
            wait_until(lambda port=port: self.client(port).ping(), timeout_s=15,
                       message=f"pod {self.index}'s {script}")

    def client(self, port: int | None = None) -> redis.Redis:
        return redis.Redis(port=port or self.redis_port, password=PASSWORD,
                           decode_responses=True, socket_timeout=2)

    def role(self) -> tuple[str, int | None]:
        info = self.client().info("replication")
        return str(info["role"]), info.get("master_port")

    def kill(self) -> None:
        for process in self.processes:
            with contextlib.suppress(ProcessLookupError):
                process.send_signal(signal.SIGKILL)
            process.wait(timeout=10)
        self.processes = []


@pytest.fixture
def pods(rendered: Render, tmp_path: Path) -> Iterator[list[Pod]]:
    data = rendered(REPLICATED).one("ConfigMap", REDIS)["data"]
    scripts = tmp_path / "scripts"
    scripts.mkdir()
    for name in ("redis.conf", "primary.sh", "start-redis.sh", "start-sentinel.sh"):
        (scripts / name).write_text(data[name])
    peers = [(free_port(), free_port()) for _ in range(3)]
    started = [Pod(i, tmp_path, scripts, peers) for i in range(3)]
    try:
        yield started
    finally:
        for pod in started:
            pod.kill()
        # Shown only when the test fails: what each Sentinel saw (a +tilt, a vote, a refusal).
        for log in sorted(tmp_path.glob("pod-*/*.log")):
            print(f"--- {log.relative_to(tmp_path)} ---\n{log.read_text(errors='replace')[-6000:]}")


def sentinel_master(pod: Pod) -> dict[str, str]:
    with pod.client(pod.sentinel_port) as sentinel:
        master = sentinel.execute_command("SENTINEL", "MASTER", "mymaster")
    return dict(zip(master[::2], master[1::2], strict=True)) if isinstance(master, list) else master


def failover_ended(pods: list[Pod], new_port: int) -> bool:
    """Every live Sentinel has switched to ``new_port`` and has no failover in progress."""
    for pod in pods:
        if not pod.processes:
            continue
        fields = sentinel_master(pod)
        if int(fields["port"]) != new_port or "failover_in_progress" in fields["flags"]:
            return False
    return True


def primary_port(pods: list[Pod]) -> int | None:
    """The primary every live Sentinel names (None while they disagree or none answers)."""
    named = set()
    for pod in pods:
        if not pod.processes:
            continue
        try:
            host_port = pod.client(pod.sentinel_port).execute_command(
                "SENTINEL", "GET-MASTER-ADDR-BY-NAME", "mymaster")
        except redis.RedisError:
            return None
        named.add(int(host_port[1]))
    return named.pop() if len(named) == 1 else None


def followers(pods: list[Pod], port: int, *, synced: bool = False) -> int:
    """Pods replicating ``port`` (with ``synced``, only those whose first sync is done)."""
    return sum(1 for pod in pods if pod.processes and pod.role() == ("slave", port) and (
        not synced or pod.client().info("replication")["master_link_status"] == "up"))


def promotable(pod: Pod) -> bool:
    return int(pod.client().config_get("replica-priority")["replica-priority"]) > 0


def wait_for_event(pods: list[Pod], event: str, timeout_s: float = 30) -> None:
    """Returns when one of the live Sentinels publishes ``event`` (e.g. +promoted-slave)."""
    channels = []
    for pod in pods:
        if pod.processes:
            channel = pod.client(pod.sentinel_port).pubsub(ignore_subscribe_messages=True)
            channel.subscribe(event)
            channels.append(channel)
    try:
        wait_until(lambda: any(channel.get_message(timeout=0.02) for channel in channels),
                   timeout_s=timeout_s, message=f"a Sentinel's {event}")
    finally:
        for channel in channels:
            channel.close()


@contextlib.contextmanager
def chart_queue(pods: list[Pod], durable_replicas: int = 1) -> Iterator[Queue]:
    """The pods started one after another (as the StatefulSet starts them), pod 0 the primary,
    and a queue writing durably through the chart's Sentinel URL."""
    for pod in pods:
        pod.start()
    assert pods[0].role()[0] == "master"
    wait_until(lambda: followers(pods, pods[0].redis_port) == 2, timeout_s=20,
               message="pods 1 and 2 replicating pod 0")
    wait_until(lambda: primary_port(pods) == pods[0].redis_port, timeout_s=20,
               message="the Sentinels naming pod 0")
    sentinels = ",".join(f"127.0.0.1:{pod.sentinel_port}" for pod in pods)
    url = (f"redis+sentinel://:{PASSWORD}@{sentinels}/mymaster/0"
           f"?sentinel_password={PASSWORD}")  # the chart's Secret, with this machine's ports
    queue = Queue(connection.connect(url), settings=QueueSettings(
        name="chart", durable_replicas=durable_replicas, durable_timeout_s=10))
    try:
        yield queue
    finally:
        queue.close()


def fail_over(pods: list[Pod], *, restart_at: str | None = None,
              stop_at: str | None = None) -> tuple[Pod, int]:
    """Kills the primary's pod and waits for the Sentinels to promote a replica; with
    ``restart_at``, the pod starts again the moment a Sentinel publishes that event; with
    ``stop_at``, returns the promoted port the moment a Sentinel publishes that one."""
    old = next(pod for pod in pods if pod.redis_port == primary_port(pods))
    others = [pod for pod in pods if pod is not old]
    old.kill()
    if restart_at:
        wait_for_event(others, restart_at)
        old.start()
    if stop_at:
        wait_for_event(others, stop_at)
        named = {int(pod.client(pod.sentinel_port).execute_command(
            "SENTINEL", "GET-MASTER-ADDR-BY-NAME", "mymaster")[1]) for pod in others}
        promoted = named - {old.redis_port}
        assert len(promoted) == 1, named
        return old, promoted.pop()
    new_port = wait_until(lambda: (p := primary_port(others)) not in (None, old.redis_port) and p,
                          timeout_s=30, message="a replica promoted")
    assert isinstance(new_port, int)
    return old, new_port


def wait_healed(pods: list[Pod], new_port: int) -> None:
    """The group after a failover: every Sentinel has ended its failover on the new primary
    and both other pods follow it. A promoted primary lost before the leader Sentinel ends
    its failover keeps that Sentinel in it (and from voting on the new primary) until the pod
    is back (docs/helm.md), so a test's next failure waits for this."""
    wait_until(lambda: failover_ended(pods, new_port), timeout_s=30,
               message="every Sentinel's failover ended")
    wait_until(lambda: followers(pods, new_port, synced=True) == 2, timeout_s=30,
               message="both replicas synced with the new primary")


def test_the_scripts_fail_over_and_bring_the_old_primary_back_as_a_replica(
        pods: list[Pod]) -> None:
    # Every write confirmed by both replicas: with one of two, Sentinel may promote the other
    # (README, "Durable writes"), which lost a job here in a loaded run.
    with chart_queue(pods, durable_replicas=2) as queue:
        confirmed = [queue.enqueue("t", {"n": 0}).job_id]
        for _ in range(2):
            old, new_port = fail_over(pods)
            old.start()  # the pod comes back, often before the leader's failover has ended
            wait_until(lambda old=old, new_port=new_port: old.role() == ("slave", new_port),
                       timeout_s=30, message="the old primary back as a replica")
            wait_healed(pods, new_port)
            confirmed.append(queue.enqueue("t", {"n": len(confirmed)}).job_id)
        assert queue.stats().ready == len(confirmed) == 3
        assert all(queue.get(job_id).status == "queued" for job_id in confirmed)


@pytest.mark.parametrize("restart_at", [
    # The leader Sentinel has sent SLAVEOF NO ONE: every Sentinel still names the old primary.
    "+failover-state-wait-promotion",
    # The leader names the promoted replica; the other Sentinel names the old primary until
    # the leader's hello reaches it.
    "+failover-state-reconf-slaves",
])
def test_the_old_primary_restarted_mid_failover_comes_back_as_a_replica(
        pods: list[Pod], restart_at: str) -> None:
    # Every replica confirms each write: a write confirmed by one replica is lost when Sentinel
    # promotes the other (README), as the restarted pod is right after its first sync, its
    # master still holding back the stream until the pod's first acknowledgement.
    with chart_queue(pods, durable_replicas=2) as queue:
        confirmed = [queue.enqueue("t", {"n": 0}).job_id]
        old, new_port = fail_over(pods, restart_at=restart_at)
        # Started as a replica (a primary stays one until Sentinel converts it, failover-timeout
        # later): its script waited for the Sentinels to agree. And not one Sentinel may
        # promote before its first sync: empty, it would lose every confirmed job.
        assert old.role()[0] == "slave"
        if followers([old], new_port, synced=True) == 0:
            assert not promotable(old)
        wait_until(lambda: followers([old], new_port, synced=True) and promotable(old),
                   timeout_s=30, message="the old primary synced and a candidate again")
        wait_healed(pods, new_port)
        confirmed.append(queue.enqueue("t", {"n": 1}).job_id)
        # The healed group fails over again, with a quorum, and keeps every confirmed job.
        fail_over(pods)
        assert queue.stats().ready == len(confirmed) == 2
        assert all(queue.get(job_id).status == "queued" for job_id in confirmed)


def test_the_promoted_primary_lost_mid_failover_heals_when_the_pods_are_back(
        pods: list[Pod]) -> None:
    """Sentinel's own window (docs/helm.md): the promoted primary lost too before the leader
    Sentinel's failover ends. No quorum is left for another failover (the leader stays in its
    failover, or, when the leader was the promoted pod's own Sentinel, the other one never
    heard of the promotion: which one leads is chance); the lost pods come back with their
    volumes, as Kubernetes restarts them, and the group heals from them."""
    with chart_queue(pods, durable_replicas=2) as queue:
        confirmed = [queue.enqueue("t", {"n": 0}).job_id]
        old, new_port = fail_over(pods, restart_at=None, stop_at="+failover-state-reconf-slaves")
        promoted = next(pod for pod in pods if pod.redis_port == new_port)
        promoted.kill()
        promoted.start(keep_data=True)
        old.start(keep_data=True)
        port = wait_until(lambda: primary_port(pods), timeout_s=60, message="a primary agreed")
        assert isinstance(port, int)
        wait_healed(pods, port)
        assert queue.stats().ready == len(confirmed)
        assert all(queue.get(job_id).status == "queued" for job_id in confirmed)
