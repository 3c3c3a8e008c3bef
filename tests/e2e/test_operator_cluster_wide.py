"""The operator with the chart's defaults (cluster-wide): writes at rest, workers that crash,
deleting a namespace.

* A JobQueue at rest costs no Kubernetes writes. With a 1 s polling interval and one JobQueue
  with nothing queued, for 60 s the audit log must show no create, update, patch or delete by the
  operator's ServiceAccount; the per-verb counts of its requests go to the run's summary. On a
  cluster of your own without a readable audit log, the objects the operator writes (the
  JobQueue, what it sets on the children, its Events) must stay unchanged instead.
* Other people's objects never reach the operator: it lists and watches Deployments, CronJobs
  and Services with the label selector of its children, so the API server filters them
  (bench/operator_scale.py measures what that saves beside 2,000 unrelated objects).
* Workers that crash: a JobQueue whose handlers module does not exist. Its worker pod exits at
  start and is restarted with the kubelet's back-off; ``Ready`` turns False with reason
  ``CrashLoopBackOff`` (also in ``kubectl get jq``) and a message naming the pod, the exit code
  and the worker's own error (the pod's termination message, FallbackToLogsOnError), with one
  Warning Event. While it keeps crashing the operator writes nothing at each restart. Fixing
  ``spec.worker.handlers`` rolls out workers that run, and ``Ready`` turns True.
* ``kubectl delete namespace`` with a JobQueue in it: the namespace goes, and the operator
  neither recreates the children the namespace controller deletes nor posts Events there (both
  would be refused: the namespace is terminating). In namespaced mode the operator's Role is in
  that namespace and goes with it, so docs/helm.md says to delete the JobQueues first.
* Objects anyone labels as the operator's children (1 MiB Deployments of no JobQueue) do not
  add up at a start: with 60 present the operator's peak is within 20 MiB of its peak with 20
  (kopf's workers used to keep every listed object for 5 s: 61 MiB more for 60 more).
* Least privilege on JobQueues: every verb the chart grants the operator on them is one it sent
  in this module (the audit log), and it sent no other.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import time
import urllib.parse
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from antre_operator import settings
from redis_servers import wait_until

from .audit import Window, format_counts
from .cluster import Cluster
from .installs import operator_rules
from .processes import LoggedProcess
from .samples import example, jobqueue
from .serving import SETTLE_S, Served, condition, serve

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


def local_ports(pid: int) -> set[int]:
    """The local TCP ports of process ``pid``'s sockets (Linux: /proc)."""
    inodes = set()
    for fd in Path(f"/proc/{pid}/fd").iterdir():
        with contextlib.suppress(OSError):
            target = os.readlink(fd)
            if target.startswith("socket:["):
                inodes.add(target[len("socket:["):-1])
    ports = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        for line in Path(table).read_text().splitlines()[1:]:
            fields = line.split()
            if fields[9] in inodes:
                ports.add(int(fields[1].rsplit(":", 1)[1], 16))
    return ports


@contextlib.contextmanager
def redis_round_trips(served: Served, log: Path) -> Iterator[list[int]]:
    """Counts the commands the operator process sends to the served Redis while open (``redis-cli
    monitor``, each line attributed by the client's port); the workers' own traffic is theirs.
    The count is in the list once closed."""
    monitor = LoggedProcess("redis-monitor", ["redis-cli", "-p", str(served.redis.port),
                                              "monitor"], log).start()
    monitor.wait_for_log("OK", timeout_s=10)
    ports = local_ports(served.operator.pid)
    counted: list[int] = []
    try:
        yield counted
    finally:
        ports |= local_ports(served.operator.pid)
        monitor.stop(timeout_s=5)
        clients = re.findall(r"^\S+ \[\d+ 127\.0\.0\.1:(\d+)\]", monitor.log(), re.MULTILINE)
        counted.append(sum(1 for port in clients if int(port) in ports))


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


def test_a_jobqueue_at_rest_makes_no_writes(served: Served, figures: list[str]) -> None:
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
        figures.append(f"{served.install.release}: the operator's requests to create one "
                          f"JobQueue's children and status: "
                          f"{format_counts(creating.counts(served.install.user))}")
    wait_until(lambda: quiet(served, 3), timeout_s=SETTLE_S, interval_s=0,
               message="the operator to settle after creating the children")

    before = operator_footprint(served, "idle")
    window = cluster.audit.window() if cluster.audit is not None else None
    with redis_round_trips(served, served.operator.log_path.with_name("monitor.log")) as counted:
        started = time.monotonic()
        deadline = started + REST_S
        while time.monotonic() < deadline:
            assert served.operator.alive(), served.operator.tail()
            time.sleep(1)
    [round_trips] = counted
    assert operator_footprint(served, "idle") == before, "the operator changed something at rest"
    # One Redis round trip (one script) per polling interval, and no more.
    assert REST_S / 2 <= round_trips <= (time.monotonic() - started) / 1.0 + 1, round_trips
    if window is None:
        figures.append(f"{served.install.release}: {REST_S} s at rest: the JobQueue, its "
                          f"children and the operator's Events unchanged (no audit log here)")
    if window is not None:
        user = served.install.user
        figures.append(f"{served.install.release}: the operator's requests in {REST_S} s "
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


def ready_condition(jq: dict[str, Any]) -> dict[str, Any]:
    return dict(next(c for c in jq["status"]["conditions"] if c["type"] == "Ready"))


def restarts(served: Served, name: str) -> int:
    pods = served.cluster.items("pods", served.namespace,
                                f"antre.dev/jobqueue={name},app.kubernetes.io/component=worker")
    return max((int(c.get("restartCount", 0)) for p in pods
                for c in (p.get("status") or {}).get("containerStatuses") or []), default=0)


def test_crashing_workers_make_the_jobqueue_not_ready_with_their_reason(
        served: Served, figures: list[str]) -> None:
    """A JobQueue whose handlers module does not exist: Ready=False, CrashLoopBackOff, the
    worker's own error; nothing written per restart; Ready=True once the spec is fixed."""
    cluster, ns = served.cluster, served.namespace
    applied = time.monotonic()
    cluster.apply(jobqueue("broken", worker={"handlers": "myapp.jobs"},
                           autoscaling={"enabled": False}, replicas=1), namespace=ns)
    jq = cluster.wait_for("jobqueue", "broken", ns, timeout_s=SETTLE_S,
                          what="Ready=False CrashLoopBackOff",
                          until=lambda jq: ready_condition(jq)["reason"] == "CrashLoopBackOff")
    not_ready_s = time.monotonic() - applied
    ready = ready_condition(jq)
    assert ready["status"] == "False"
    # The worker's: at a minute boundary the reaper CronJob adds a pod of its own (left Pending).
    [pod] = [p["metadata"]["name"] for p in cluster.items(
        "pods", ns, "antre.dev/jobqueue=broken,app.kubernetes.io/component=worker")]
    assert ready["message"] == (
        f"0/1 workers available; pod {pod}: container worker exited with code 2: antre worker: "
        f"handlers module 'myapp.jobs': not importable (No module named 'myapp'); check "
        f"--handlers and PYTHONPATH"), ready["message"]
    row = cluster.kubectl("get", "jq", "broken", "-n", ns, "--no-headers").stdout.split()
    assert row[:3] == ["broken", "False", "CrashLoopBackOff"], row

    # A restart of the crashing pod (the back-off is 10 s after the second exit) writes nothing:
    # the reason and the message stay the same from one exit to the next.
    wait_until(lambda: restarts(served, "broken") >= 2, timeout_s=SETTLE_S, interval_s=0.3,
               message="the pod restarted twice")
    window = cluster.audit.window() if cluster.audit is not None else None
    before = operator_footprint(served, "broken")
    wait_until(lambda: restarts(served, "broken") >= 3, timeout_s=SETTLE_S, interval_s=0.3,
               message="a third restart after the back-off")
    time.sleep(2)  # two more polls of the operator, which has seen the restart by then
    assert condition(cluster.get("jobqueue", "broken", ns) or {}, "Ready") == "False"
    assert operator_footprint(served, "broken") == before, "the operator wrote at a restart"
    if window is not None:
        writes = window.writes(served.install.user)
        assert not writes, "writes while crashing:\n" + "\n".join(map(str, writes))
        figures.append(f"{served.install.release}: a crash-looping worker: Ready=False "
                          f"CrashLoopBackOff {not_ready_s:.1f} s after kubectl apply; the "
                          f"operator's requests across one restart (pods listed each poll "
                          f"while a worker is unavailable): "
                          f"{format_counts(window.counts(served.install.user))}")
    warnings = [e for e in cluster.items("events", ns)
                if e["involvedObject"].get("name") == "broken" and e["type"] == "Warning"
                and e["reason"] == "CrashLoopBackOff"]
    assert len(warnings) == 1 and warnings[0].get("count", 1) == 1, warnings

    fixed = time.monotonic()
    cluster.kubectl("patch", "jq", "broken", "-n", ns, "--type=merge", "-p",
                    '{"spec": {"worker": {"handlers": "antre.example_handlers"}}}')
    jq = served.wait_ready("broken")
    assert ready_condition(jq)["reason"] == "WorkersAvailable"
    assert any(e["reason"] == "WorkersRecovered" for e in cluster.items("events", ns)
               if e["involvedObject"].get("name") == "broken")
    figures.append(f"{served.install.release}: Ready=True {time.monotonic() - fixed:.1f} s "
                      f"after spec.worker.handlers was fixed (a rollout)")
    cluster.kubectl("delete", "jq", "broken", "-n", ns, "--wait=true")


def test_a_child_the_api_server_refuses_is_not_sent_again_every_poll(
        served: Served, figures: list[str]) -> None:
    """spec.worker.affinity is free-form in the CRD, so a value only the API server refuses
    reaches the operator: Ready=False, reason ApplyFailed, naming the JobQueue's field; the same
    Deployment is sent again after a pause (10 s, doubling), not at every 1 s poll; a fixed spec
    is applied at once."""
    cluster, ns = served.cluster, served.namespace
    assert cluster.audit is not None, "needs the API server's audit log (the suite's own has one)"
    bogus = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
        "nodeSelectorTerms": [{"matchExpressions": [{"key": "zone", "operator": "Near"}]}]}}}
    window = cluster.audit.window()
    cluster.apply(jobqueue("refused", worker={"affinity": bogus}, autoscaling={"enabled": False},
                           replicas=1), namespace=ns)
    jq = cluster.wait_for("jobqueue", "refused", ns, timeout_s=SETTLE_S,
                          what="Ready=False ApplyFailed",
                          until=lambda jq: ready_condition(jq).get("reason") == "ApplyFailed")
    message = ready_condition(jq)["message"]
    assert "spec.worker.affinity" in message and "Near" in message, message
    sends: list[Any] = []

    def sent_twice() -> bool:
        sends[:] = [r for r in window.writes(served.install.user)
                    if r.resource == "deployments" and r.name == "refused-worker"]
        return len(sends) >= 2

    # The second send is the retry after the pause; the polls in between (every 1 s) sent none.
    wait_until(sent_twice, timeout_s=SETTLE_S, interval_s=0.5, message="the refused retry")
    assert [r.code for r in sends[:2]] == [422, 422], "\n".join(map(str, sends))
    pause_s = sends[1].at - sends[0].at
    assert pause_s >= 9.5, "\n".join(map(str, sends))
    figures.append(f"{served.install.release}: a worker Deployment the API server refuses: "
                   f"sent again {pause_s:.1f} s after the refusal, nothing in between "
                   f"(polling every 1 s)")

    fixed = time.monotonic()
    cluster.kubectl("patch", "jq", "refused", "-n", ns, "--type=json", "-p",
                    '[{"op": "remove", "path": "/spec/worker/affinity"}]')
    wait_until(lambda: cluster.get("deployment", "refused-worker", ns), timeout_s=SETTLE_S,
               interval_s=0.2, message="the worker Deployment applied after the fix")
    assert time.monotonic() - fixed < 5, "a fixed spec waited for the refusal's pause"
    cluster.kubectl("delete", "jq", "refused", "-n", ns, "--wait=true")


def test_an_api_that_does_not_start_is_in_the_status(served: Served) -> None:
    """Ready speaks for the workers; an API pod that never becomes available (here the test
    kubelet runs worker pods only, so it stays Pending) turns ApiAvailable False, naming its
    Deployment, from the watch's cache."""
    cluster, ns = served.cluster, served.namespace
    cluster.apply(jobqueue("with-api", api={"enabled": True, "tokenSecretRef": {"name": "tok"}},
                           autoscaling={"enabled": False}, replicas=1), namespace=ns)
    served.wait_ready("with-api")
    jq = cluster.wait_for("jobqueue", "with-api", ns, timeout_s=SETTLE_S,
                          what="ApiAvailable=False",
                          until=lambda jq: condition(jq, "ApiAvailable") == "False")
    [api] = [c for c in jq["status"]["conditions"] if c["type"] == "ApiAvailable"]
    assert (api["reason"], api["message"]) == (
        "ApiUnavailable", "0/1 API pods available; see kubectl describe deployment with-api-api")
    assert condition(jq, "Ready") == "True"
    cluster.kubectl("patch", "jq", "with-api", "-n", ns, "--type=merge", "-p",
                    '{"spec": {"api": {"enabled": false}}}')
    cluster.wait_for("jobqueue", "with-api", ns, timeout_s=SETTLE_S, what="no ApiAvailable",
                     until=lambda jq: condition(jq, "ApiAvailable") is None)
    cluster.kubectl("delete", "jq", "with-api", "-n", ns, "--wait=true")


def test_a_reaper_whose_last_run_failed_is_in_the_status(served: Served) -> None:
    """ReaperSucceeding follows the reaper CronJob's status through the operator's watch. The
    CronJob is suspended, so the cronjob controller leaves its status alone, and the status is
    written here as that controller writes it after a run whose pods all failed (a real failing
    run is in the unit test's sequence; here it is the watch and the write that are tested)."""
    cluster, ns = served.cluster, served.namespace
    cluster.apply(jobqueue("reaped-badly", reaper={"suspend": True},
                           autoscaling={"enabled": False}, replicas=0), namespace=ns)
    served.wait_child("cronjob", "reaped-badly-reaper")
    served.wait_condition("reaped-badly", "ReaperSucceeding", "True")

    def reaper_status(**found: str) -> None:
        cluster.kubectl("patch", "cronjob", "reaped-badly-reaper", "-n", ns,
                        "--subresource=status", "--type=merge", "-p",
                        json.dumps({"status": found}))

    reaper_status(lastScheduleTime="2030-01-01T00:01:00Z",
                  lastSuccessfulTime="2030-01-01T00:00:04Z")
    jq = served.wait_condition("reaped-badly", "ReaperSucceeding", "False")
    [reaper] = [c for c in jq["status"]["conditions"] if c["type"] == "ReaperSucceeding"]
    assert reaper["reason"] == "LastRunFailed"
    assert reaper["message"].startswith(
        "the last run of CronJob reaped-badly-reaper did not succeed (last success: "
        "2030-01-01T00:00:04Z)"), reaper["message"]
    reaper_status(lastSuccessfulTime="2030-01-01T00:01:07Z")
    served.wait_condition("reaped-badly", "ReaperSucceeding", "True")
    cluster.kubectl("delete", "jq", "reaped-badly", "-n", ns, "--wait=true")


def test_deleting_the_namespace_takes_its_jobqueues_along(served: Served) -> None:
    """``kubectl delete namespace`` with a JobQueue in it: the operator lets it go (releases
    its finalizer, recreates nothing) and the namespace disappears."""
    cluster, ns = served.cluster, served.namespace
    cluster.apply(example("jobqueue"), namespace=ns)
    served.wait_ready("emails")
    cluster.kubectl("delete", "namespace", ns, "--wait=true", f"--timeout={SETTLE_S:.0f}s")
    assert cluster.get("namespace", ns) is None


#: Objects anyone labels as the operator's, of this size each (the API server takes about
#: 1.5 MiB): a few, then many, present at an operator's start.
STRANGER_BYTES = 1024 * 1024
STRANGERS_FEW, STRANGERS_MANY = 20, 60


def strangers_deployment(name: str) -> dict[str, Any]:
    """A Deployment of STRANGER_BYTES labelled as a child of the operator's (replicas 0:
    nothing runs), as anyone who may create a Deployment may make one; annotations take at most
    256 KiB, so most of it is an env value."""
    note = 200 * 1024
    return {"apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": name, "annotations": {"pad": "y" * note},
                         "labels": {settings.LABEL_MANAGED_BY: settings.MANAGED_BY,
                                    settings.LABEL_JOBQUEUE: "nothing"}},
            "spec": {"replicas": 0, "selector": {"matchLabels": {"app": name}},
                     "template": {"metadata": {"labels": {"app": name}}, "spec": {"containers": [{
                         "name": "c", "image": "busybox",
                         "env": [{"name": "PAD", "value": "x" * (STRANGER_BYTES - note)}]}]}}}}


def peak_memory_mib(pid: int) -> float:
    """The process's peak resident memory so far (VmHWM), in MiB."""
    status = Path(f"/proc/{pid}/status").read_text()
    return int(re.search(r"^VmHWM:\s+(\d+) kB", status, re.MULTILINE)[1]) / 1024  # type: ignore[index]


def peak_memory_once_listed(served: Served, listing: Window) -> float:
    """The restarted operator's peak memory once it has listed every child kind and watches
    them (the audit log) and its peak has stayed put for a second."""
    kinds = {"deployments", "cronjobs", "services"}
    wait_until(lambda: kinds <= {r.resource for r in listing.requests(served.install.user)
                                 if r.verb == "watch"},
               timeout_s=SETTLE_S, interval_s=0.2, message="the operator watching children")
    history: list[float] = []

    def settled() -> bool:
        history.append(peak_memory_mib(served.operator.pid))
        return len(history) > 4 and history[-5] == history[-1]

    wait_until(settled, timeout_s=SETTLE_S, interval_s=0.25, message="a settled peak")
    return history[-1]


def test_objects_anyone_labels_as_children_do_not_add_up_at_start(
        served: Served, tmp_path: Path, figures: list[str]) -> None:
    """Review finding: anyone who may create Deployments may label 1 MiB ones as children of
    the operator's. At every start kopf lists them all, in pages, and its worker of each object
    kept the object's last event for 5 s after handling it, so they were all in memory at once:
    120 took a restart to 228 MiB, and about 150 past the chart's 256Mi limit, stopping every
    JobQueue. The peak at start must not grow with their number."""
    cluster = served.cluster
    if cluster.audit is None:
        pytest.skip("needs the API server's audit log to know when the lists are done; the "
                    "suite's own control plane has one")
    namespace = cluster.create_namespace("strangers")
    try:
        peaks: dict[int, float] = {}
        for count in (STRANGERS_FEW, STRANGERS_MANY):
            for index in range(len(peaks) and STRANGERS_FEW, count):
                status, answer = cluster.request(
                    "POST", f"/apis/apps/v1/namespaces/{namespace}/deployments",
                    strangers_deployment(f"filler-{index}"))
                assert status == 201, answer
            served.operator.stop(timeout_s=15)
            listing = cluster.audit.window()
            # Ahead of the suite's other processes for the CPU: what is measured is what kopf
            # keeps of objects it handled, not a backlog of events its workers had no CPU for
            # (on a loaded 2-core machine those too took the peak up by 29 MiB for 40 more).
            if served.operator.argv[0] != "nice":
                served.operator.argv = ["nice", "-n", "-10", *served.operator.argv]
            served.restart_operator(tmp_path / f"operator-{count}.log")
            peaks[count] = peak_memory_once_listed(served, listing)
        figures.append(f"operator's peak at start with {STRANGERS_FEW} / {STRANGERS_MANY} labelled "
                       f"1 MiB Deployments of no JobQueue: {peaks[STRANGERS_FEW]:.0f} / "
                       f"{peaks[STRANGERS_MANY]:.0f} MiB")
        grown = peaks[STRANGERS_MANY] - peaks[STRANGERS_FEW]
        assert grown < 20, (f"{STRANGERS_MANY - STRANGERS_FEW} more such objects took the "
                            f"operator's peak at start {grown:.0f} MiB higher: {peaks}")
    finally:
        cluster.delete_namespace(namespace)
        if served.operator.argv[0] == "nice":  # the module's other tests run it as it was
            served.operator.stop(timeout_s=15)
            served.operator.argv = served.operator.argv[3:]
            served.restart_operator(tmp_path / "operator-after.log")


def test_the_chart_grants_the_operator_no_verb_it_never_sends_on_jobqueues(
        served: Served) -> None:
    """The verbs the operator's ServiceAccount sent on JobQueues in this module (JobQueues
    created, changed, failing, deleted: kopf's finalizer and annotations) are the verbs the
    chart grants it on them (a review found get granted and never used: kopf lists and
    watches, and hands its daemons the body from the watch). Kept last in the module, after
    every JobQueue of it came and went."""
    audit = served.cluster.audit
    if audit is None:
        pytest.skip("needs the API server's audit log; the suite's own control plane has one")
    granted = {verb for rule in operator_rules(served.cluster, served.install)
               if "antre.dev" in rule["apiGroups"] and "jobqueues" in rule["resources"]
               for verb in rule["verbs"]}
    used = {r.verb for r in audit.requests() if r.user == served.install.user
            and r.resource == "jobqueues"}
    assert used == granted == {"list", "watch", "patch"}, (used, granted)
