"""The operator with the chart's defaults (cluster-wide): writes at rest, deleting a namespace.

* A JobQueue at rest costs no Kubernetes writes. With a 1 s polling interval and one JobQueue
  with nothing queued, for 60 s the audit log must show no create, update, patch or delete by the
  operator's ServiceAccount; the per-verb counts of its requests go to the run's summary. On a
  cluster of your own without a readable audit log, the objects the operator writes (the
  JobQueue, what it sets on the children, its Events) must stay unchanged instead.
* Other people's objects never reach the operator: it lists and watches Deployments, CronJobs
  and Services with the label selector of its children, so the API server filters them
  (bench/operator_scale.py measures what that saves beside 2,000 unrelated objects).
* ``kubectl delete namespace`` with a JobQueue in it: the namespace goes, and the operator
  neither recreates the children the namespace controller deletes nor posts Events there (both
  would be refused: the namespace is terminating). In namespaced mode the operator's Role is in
  that namespace and goes with it, so docs/helm.md says to delete the JobQueues first.
"""

from __future__ import annotations

import time
import urllib.parse
from collections.abc import Iterator
from typing import Any

import pytest
import redis
from antre_operator import settings
from redis_servers import wait_until

from .audit import format_counts
from .cluster import Cluster
from .samples import example
from .serving import SETTLE_S, Served, serve

REST_S = 60


@pytest.fixture(scope="module")
def served(cluster: Cluster, crds: None,
           tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    with serve(cluster, "cluster-wide", tmp_path_factory.mktemp("cluster-wide")) as served:
        yield served
    assert not served.refusals(), "\n".join(served.refusals())


def operator_footprint(served: Served, name: str) -> dict[str, Any]:
    """What the operator writes for JobQueue ``name``, as stored: the JobQueue (status,
    finalizers, annotations: nobody else writes it), what it sets on the children (controllers
    write their status, which is not counted), and the Events it posted."""
    cluster, ns = served.cluster, served.namespace
    jobqueue = cluster.get("jobqueue", name, ns)
    assert jobqueue is not None
    footprint: dict[str, Any] = {"jobqueue": jobqueue["metadata"]["resourceVersion"]}
    for kind in ("deployments", "cronjobs", "services"):
        for child in cluster.items(kind, ns, f"antre.dev/jobqueue={name}"):
            meta = child["metadata"]
            footprint[f"{kind}/{meta['name']}"] = (
                meta.get("generation"), meta.get("labels"), meta.get("annotations"),
                meta.get("ownerReferences"))
    footprint["events"] = sorted(
        e["metadata"]["name"] for e in cluster.items("events", ns)
        if (e.get("source") or {}).get("component") == "kopf"
        and e["involvedObject"].get("name") == name)
    return footprint


def script_calls(served: Served) -> int:
    """Lua scripts run by the served Redis so far: one per operator poll at rest."""
    stats = redis.Redis.from_url(served.redis.url).info("commandstats")
    return sum(int(v["calls"]) for k, v in stats.items() if k in ("cmdstat_evalsha", "cmdstat_eval"))


def quiet(served: Served, seconds: float) -> bool:
    """No write by the operator for ``seconds`` (from the audit log, else the footprint)."""
    audit = served.cluster.audit
    if audit is not None:
        window = audit.window()
        time.sleep(seconds)
        return not window.writes(served.install.user)
    before = operator_footprint(served, "idle")
    time.sleep(seconds)
    return operator_footprint(served, "idle") == before


def test_a_jobqueue_at_rest_makes_no_writes(served: Served, e2e_report: list[str]) -> None:
    """One JobQueue with nothing queued, for REST_S seconds: no create, update, patch or delete
    by the operator (the audit log; on a cluster of your own without one, the objects)."""
    cluster, ns = served.cluster, served.namespace
    body = example("jobqueue")
    body["metadata"]["name"] = "idle"
    creating = cluster.audit.window() if cluster.audit is not None else None
    cluster.apply(body, namespace=ns)
    jq = served.wait_ready("idle")
    assert jq["status"]["backlog"] == 0
    if creating is not None:
        # The log does attribute the operator's requests to its ServiceAccount (server-side
        # apply creates with a patch).
        created = {r.resource for r in creating.writes(served.install.user) if r.verb == "patch"}
        assert {"deployments", "cronjobs"} <= created, created
        e2e_report.append(f"{served.install.release}: the operator's requests to create one "
                          f"JobQueue's children and status: "
                          f"{format_counts(creating.counts(served.install.user))}")
    wait_until(lambda: quiet(served, 3), timeout_s=SETTLE_S, interval_s=0,
               message="the operator to settle after creating the children")

    before = operator_footprint(served, "idle")
    window = cluster.audit.window() if cluster.audit is not None else None
    scripts_before, started = script_calls(served), time.monotonic()
    deadline = started + REST_S
    while time.monotonic() < deadline:
        assert served.operator.alive(), served.operator.tail()
        time.sleep(1)
    round_trips = script_calls(served) - scripts_before
    assert operator_footprint(served, "idle") == before, "the operator changed something at rest"
    # One Redis round trip (one script) per polling interval, and no more.
    assert round_trips <= (time.monotonic() - started) / 1.0 + 1, round_trips
    if window is None:
        e2e_report.append(f"{served.install.release}: {REST_S} s at rest: the JobQueue, its "
                          f"children and the operator's Events unchanged (no audit log here)")
    if window is not None:
        user = served.install.user
        e2e_report.append(f"{served.install.release}: the operator's requests in {REST_S} s "
                          f"with one JobQueue at rest (polling every 1 s): "
                          f"{format_counts(window.counts(user))}; Redis round trips: "
                          f"{round_trips}")
        writes = window.writes(user)
        assert not writes, "writes at rest:\n" + "\n".join(map(str, writes))


def test_children_are_watched_with_a_label_selector(served: Served) -> None:
    """Every list and watch of Deployments, CronJobs and Services by the operator names the
    label of its children, so the API server sends it nothing else (from the audit log)."""
    audit = served.cluster.audit
    if audit is None:
        pytest.skip("needs the API server's audit log; the suite's own control plane has one")
    reads = [r for r in audit.requests() if r.user == served.install.user
             and r.verb in ("list", "watch")
             and r.resource in ("deployments", "cronjobs", "services")]
    assert {r.resource for r in reads} == {"deployments", "cronjobs", "services"}, reads
    for request in reads:
        query = urllib.parse.parse_qs(urllib.parse.urlsplit(request.uri).query)
        assert query.get("labelSelector") == [f"{settings.LABEL_MANAGED_BY}={settings.MANAGED_BY}"
                                              ], request.uri


def test_deleting_the_namespace_takes_its_jobqueues_along(served: Served) -> None:
    """``kubectl delete namespace`` with a JobQueue in it: the operator lets it go (releases
    its finalizer, recreates nothing) and the namespace disappears."""
    cluster, ns = served.cluster, served.namespace
    cluster.apply(example("jobqueue"), namespace=ns)
    served.wait_ready("emails")
    cluster.kubectl("delete", "namespace", ns, "--wait=true", f"--timeout={SETTLE_S:.0f}s")
    assert cluster.get("namespace", ns) is None
