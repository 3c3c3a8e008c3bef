"""What the autoscaling scenarios share: a served namespace with the test kubelet, fast JobQueues,
job histories, and timelines gathered from every component's own clock.

:class:`Autoscaled` is the chart's operator (``serving.py``, polling every second) plus the test
kubelet (``kubelet.py``) running the namespace's pods as real processes. Its JobQueues run the
example handlers' ``sleep`` jobs with short windows. A :class:`Timeline` collects what happened,
each event at the time its own source recorded it: enqueue (this process), the operator's
decision (its log line), the Deployment change (the API server's audit log), pods started and
Ready (the kubelet), jobs done (the job records' history, on Redis's clock).
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import re
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import antre
from antre.jobs import HistoryEvent, JobInfo
from redis_servers import wait_until

from .audit import Request
from .kubelet import KubeletEvent, TestKubelet
from .samples import jobqueue
from .serving import Served

#: The polling interval every scenario runs with (pollingIntervalSeconds and the operator's).
POLLING_S = 1.0
_LOG_LINE = re.compile(r"^\[(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d),(\d{3})\] (.*)$")


def fast_jobqueue(name: str, *, concurrency: int, max_replicas: int, min_replicas: int = 0,
                  target: int = 1, stabilization_s: int = 3, cooldown_s: int = 30,
                  visibility_s: int = 30, max_step: int | None = None,
                  reaper: bool = False) -> dict[str, Any]:
    """A JobQueue of ``antre.example_handlers`` workers on short windows; its reaper CronJob is
    suspended unless ``reaper`` (each run is a process: the scenarios do without)."""
    autoscaling: dict[str, Any] = {
        "enabled": True, "minReplicas": min_replicas, "maxReplicas": max_replicas,
        "targetBacklogPerReplica": target, "pollingIntervalSeconds": int(POLLING_S),
        "scaleDownStabilizationSeconds": stabilization_s, "cooldownSeconds": cooldown_s}
    if max_step is not None:
        autoscaling["maxScaleUpStep"] = max_step
    return jobqueue(
        name,
        worker={"handlers": "antre.example_handlers", "concurrency": concurrency,
                "visibilityTimeoutSeconds": visibility_s, "terminationGracePeriodSeconds": 10,
                "maxAttempts": 5},
        autoscaling=autoscaling,
        reaper={"schedule": "* * * * *", "suspend": not reaper})


def local_time(stamp: str, millis: str) -> float:
    """A kopf log timestamp (local time, "YYYY-mm-dd HH:MM:SS" and milliseconds) as Unix time."""
    return time.mktime(time.strptime(stamp, "%Y-%m-%d %H:%M:%S")) + int(millis) / 1000


@dataclasses.dataclass(frozen=True)
class Decision:
    at: float
    before: int
    after: int
    reason: str


class Timeline:
    """Events of one scenario, printed relative to its first mark."""

    def __init__(self, title: str) -> None:
        self.title = title
        self.events: list[tuple[float, str]] = []

    def mark(self, what: str, at: float | None = None) -> float:
        at = time.time() if at is None else at
        self.events.append((at, what))
        return at

    def lines(self) -> list[str]:
        events = sorted(self.events)
        start = events[0][0] if events else 0.0
        return [f"{self.title}:"] + [f"  {at - start:7.2f} s  {what}" for at, what in events]

    def report(self, sink: list[str]) -> None:
        """Print the timeline (``pytest -s`` shows it) and add it to the run's summary."""
        text = self.lines()
        print("\n" + "\n".join(text))
        sink.extend(text)


class Autoscaled:
    """One served namespace whose pods the test kubelet runs; see the module docstring."""

    def __init__(self, served: Served, kubelet: TestKubelet, workdir: Path) -> None:
        self.served = served
        self.kubelet = kubelet
        self.workdir = workdir
        self.cluster = served.cluster
        self.namespace = served.namespace
        self._queues: dict[str, antre.Queue] = {}

    # -- JobQueues ------------------------------------------------------------------------------

    def apply(self, body: dict[str, Any]) -> None:
        self.cluster.apply(body, namespace=self.namespace)
        self.served.wait_ready(body["metadata"]["name"])

    @contextlib.contextmanager
    def jobqueue(self, body: dict[str, Any]) -> Iterator[str]:
        """The JobQueue applied and Ready; deleted at the end, waiting until its pods are gone
        (the kubelet has stopped their processes)."""
        name = str(body["metadata"]["name"])
        self.apply(body)
        try:
            yield name
        finally:
            self.delete(name)

    def delete(self, name: str) -> None:
        self.cluster.kubectl("delete", "jobqueue", name, "-n", self.namespace, "--wait=true",
                             "--timeout=60s")
        wait_until(lambda: not self.pods(name), timeout_s=60, interval_s=0.3,
                   message=f"the pods of {name} gone")

    def patch(self, name: str, spec: dict[str, Any]) -> None:
        self.cluster.kubectl("patch", "jobqueue", name, "-n", self.namespace, "--type=merge",
                             "-p", json.dumps({"spec": spec}))

    # -- reading the cluster ----------------------------------------------------------------------

    def worker(self, name: str) -> dict[str, Any]:
        deployment = self.served.child("deployment", f"{name}-worker")
        assert deployment is not None, f"{name}-worker"
        return deployment

    def replicas(self, name: str) -> int:
        return int(self.worker(name)["spec"]["replicas"])

    def wait_replicas(self, name: str, replicas: int, *, timeout_s: float = 30) -> None:
        wait_until(lambda: self.replicas(name) == replicas, timeout_s=timeout_s, interval_s=0.2,
                   message=f"{name}-worker at {replicas} replicas")

    def pods(self, name: str) -> list[dict[str, Any]]:
        return self.cluster.items("pods", self.namespace,
                                  f"antre.dev/jobqueue={name},app.kubernetes.io/component=worker")

    def wait_ready_pods(self, name: str, count: int, *, timeout_s: float = 60) -> list[str]:
        """Wait until ``count`` worker pods are Running and Ready (as the API server has them)."""
        def ready() -> list[str] | None:
            pods = self.pods(name)
            names = [p["metadata"]["name"] for p in pods
                     if p["status"].get("phase") == "Running" and not
                     p["metadata"].get("deletionTimestamp") and any(
                         c["type"] == "Ready" and c["status"] == "True"
                         for c in p["status"].get("conditions") or [])]
            return names if len(names) == count and len(pods) == count else None
        found = wait_until(ready, timeout_s=timeout_s, interval_s=0.3,
                           message=f"{count} Ready worker pods of {name}")
        assert isinstance(found, list)
        return found

    def decisions(self, name: str) -> list[Decision]:
        """The operator's "Scaled workers A -> B" lines for JobQueue ``name``."""
        pattern = re.compile(rf"{re.escape(self.namespace)}/{re.escape(name)}: "
                             r"Scaled workers (\d+) -> (\d+): (.*)$")
        found = []
        for line in self.served.operator.log().splitlines():
            stamped = _LOG_LINE.match(line)
            scaled = pattern.search(line) if stamped else None
            if stamped and scaled:
                found.append(Decision(local_time(stamped.group(1), stamped.group(2)),
                                      int(scaled.group(1)), int(scaled.group(2)),
                                      scaled.group(3)))
        return found

    def operator_writes(self, since: float, resource: str, name: str | None = None,
                        ) -> list[Request]:
        """The operator's writes of ``resource`` (by name when given) from ``since`` on."""
        audit = self.cluster.audit
        assert audit is not None, "the built control plane keeps an audit log"
        return [r for r in audit.requests() if r.user == self.served.install.user
                and r.is_write and r.resource == resource and r.at >= since
                and (name is None or r.name == name)]

    def pod_events(self, name: str, what: str, since: float = 0.0) -> list[KubeletEvent]:
        prefix = f"{name}-worker-"
        return [e for e in self.kubelet.events_of(self.namespace, what)
                if e.pod.startswith(prefix) and e.at >= since]

    def worker_log(self, pod: str) -> list[dict[str, Any]]:
        """The JSON lines a worker pod's processes logged (across restarts)."""
        lines = []
        for line in self.kubelet.log(self.namespace, pod).splitlines():
            with contextlib.suppress(ValueError):
                entry = json.loads(line)
                if isinstance(entry, dict):
                    lines.append(entry)
        return lines

    def pods_of_workers(self, name: str) -> dict[str, str]:
        """worker id -> pod name, from the "worker started" lines of every pod ever run."""
        owners = {}
        for run in self.kubelet.runs(self.namespace, gone=True):
            if run.name.startswith(f"{name}-worker-"):
                for entry in self.worker_log(run.name):
                    if entry.get("msg") == "worker started":
                        owners[str(entry["worker_id"])] = run.name
        return owners

    # -- jobs ----------------------------------------------------------------------------------------

    def queue(self, name: str) -> antre.Queue:
        if name not in self._queues:
            self._queues[name] = antre.Queue.from_url(self.served.redis.url, name)
        return self._queues[name]

    def close(self) -> None:
        for queue in self._queues.values():
            queue.close()

    def enqueue_sleeps(self, name: str, seconds: Sequence[float]) -> list[str]:
        results = self.queue(name).enqueue_many([("sleep", {"seconds": s}) for s in seconds])
        return [r.job_id for r in results]

    def jobs(self, name: str, ids: Sequence[str]) -> list[JobInfo]:
        queue = self.queue(name)
        return [queue.get(job_id) for job_id in ids]

    def wait_jobs(self, name: str, ids: Sequence[str], status: str = "done", *,
                  timeout_s: float = 60) -> list[JobInfo]:
        def reached() -> list[JobInfo] | None:
            jobs = self.jobs(name, ids)
            return jobs if all(str(j.status) == status for j in jobs) else None
        found = wait_until(reached, timeout_s=timeout_s, interval_s=0.2,
                           message=f"{len(ids)} jobs of {name} {status}")
        assert isinstance(found, list)
        return found


def events(job: JobInfo, *names: str) -> list[HistoryEvent]:
    """The job's history events with these names (all when none given), oldest first. A
    prefetched job a worker handed back unstarted (``handed_back`` and the claim it undid) is
    left out: it never ran there, so it is neither a run nor an interruption (``released``)."""
    history = list(job.history)
    handed_back = {i for i, e in enumerate(history) if e.event == "handed_back"}
    claims_undone = {max(j for j in range(i) if history[j].event == "claimed")
                     for i in handed_back}
    return [e for i, e in enumerate(history) if i not in handed_back | claims_undone
            and (not names or e.event in names)]


def done_at(job: JobInfo) -> float:
    """When the job was acknowledged done (Unix time, Redis's clock)."""
    acked = events(job, "acked")
    assert acked, f"{job.id} not acked: {job.history}"
    return acked[-1].at_ms / 1000
