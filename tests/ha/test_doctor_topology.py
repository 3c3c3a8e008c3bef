"""``antre doctor`` and ``inspect`` on a Sentinel group: which server is the primary, through
which service, and how far each replica lags; after a failover, the new primary; a replica that
stopped following; durable writes that no replica can confirm; a client on a replica.
"""

from __future__ import annotations

import json
import signal

import pytest
from antre import cli, findings
from antre.findings import Severity
from antre.protocol.depth import Depth
from antre.topology import Replica, Topology
from redis_sentinels import SERVICE, SentinelGroup
from redis_servers import wait_until

QUEUE = ["--queue", "ha", "--sample-gap", "0"]


def doctor(url: str, capsys: pytest.CaptureFixture[str], *extra: str) -> tuple[int, str]:
    code = cli.main(["doctor", "--redis-url", url, *QUEUE, *extra])
    return code, capsys.readouterr().out


def test_doctor_names_the_primary_and_the_replicas_lag(
        sentinels: SentinelGroup, capsys: pytest.CaptureFixture[str]) -> None:
    code, out = doctor(sentinels.url(), capsys)
    primary = sentinels.primary_port()
    replicas = [port for port in sentinels.live_ports() if port != primary]
    assert code == 0, out
    assert (f"INFO     redis_replication: primary 127.0.0.1:{primary} (Sentinel service "
            f"'{SERVICE}'); 2 replica(s):") in out
    for port in replicas:
        assert f"127.0.0.1:{port} online, lag 0 s" in out or (
            f"127.0.0.1:{port} online, lag 1 s" in out)

    failover = sentinels.fail_over()
    code, out = doctor(sentinels.url(), capsys)
    assert code == 0, out
    assert f"primary 127.0.0.1:{sentinels.primary_port()} (Sentinel service" in out
    assert f"primary 127.0.0.1:{failover.killed_port} " not in out

    assert cli.main(["inspect", "--redis-url", sentinels.url(), *QUEUE, "--json"]) == 0
    shown = json.loads(capsys.readouterr().out)["redis"]
    assert shown["primary"] == f"127.0.0.1:{sentinels.primary_port()}"
    assert shown["sentinel_service"] == SERVICE and len(shown["replicas"]) == 2


def test_doctor_warns_of_a_replica_that_stopped_following(
        sentinels: SentinelGroup, capsys: pytest.CaptureFixture[str]) -> None:
    primary = sentinels.primary_port()
    stalled = next(port for port in sentinels.live_ports() if port != primary)
    process = sentinels.servers[stalled].process
    assert process is not None
    process.send_signal(signal.SIGSTOP)
    try:
        with sentinels.primary_client() as client:
            client.set("nudge", 1)  # something to acknowledge
        # The replica acknowledges every second; stopped, its lag grows past the threshold.
        code, out = wait_until(
            lambda: (found := doctor(sentinels.url(), capsys, "--max-replica-lag", "1"))[0] == 1
            and found, timeout_s=15, interval_s=0.2, message="doctor to see the replica lag")
    finally:
        process.send_signal(signal.SIGCONT)
    assert code == 1, out
    assert f"WARNING  replica_lag: replica(s) not following the primary: 127.0.0.1:{stalled}" in out


def test_doctor_says_when_durable_writes_cannot_be_confirmed(
        sentinels: SentinelGroup, capsys: pytest.CaptureFixture[str],
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ANTRE_DURABLE_REPLICAS", "3")
    code, out = doctor(sentinels.url(), capsys)
    assert code == 2, out
    assert "CRITICAL durable_writes_blocked: durable_replicas is 3 but 2 replica(s) are online" in out


def test_a_client_on_a_replica_is_critical() -> None:
    depth = Depth(now_ms=1, ready=0, processing=0, expired_leases=0, scheduled=0, due=0, dead=0,
                  oldest_ready_age_s=None, workers=0)
    snapshot = findings.Snapshot(
        queue="q", before=depth, after=depth,
        topology=Topology(primary="10.0.0.5:6379", sentinel_service=None, role="slave"))
    [finding] = [f for f in findings.diagnose(snapshot) if f.code == "redis_not_primary"]
    assert finding.severity is Severity.CRITICAL and "10.0.0.5:6379, a slave" in finding.summary
    lone = findings.Snapshot(queue="q", before=depth, after=depth, topology=Topology(
        primary="h:1", sentinel_service=None, role="master"))
    assert findings.diagnose(lone) == []  # a single server without replicas: nothing to say
    lagging = findings.Snapshot(queue="q", before=depth, after=depth, topology=Topology(
        primary="h:1", sentinel_service=None, role="master",
        replicas=(Replica("h:2", "online", 0, 0), Replica("h:3", "wait_bgsave", 0, 900))))
    codes = [f.code for f in findings.diagnose(lagging)]
    assert codes == ["replica_lag", "redis_replication"]
