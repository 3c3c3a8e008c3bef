"""The operator at scale on a real API server: 200 JobQueues on one Redis, at rest, under changing
backlogs, and beside 2,000 unrelated Deployments and Services.

Each watch design gets a fresh control plane of its own (etcd, kube-apiserver with an audit log,
kube-controller-manager: ``tests/e2e/control_plane.py``), a fresh redis-server and the operator
as a separate process (``python -m antre_operator``, user ``antre-operator``), then:

1. the JobQueues are created (reaper CronJobs suspended: there is no kubelet to run them) and
   the operator's writes settle;
2. **at rest** for ``--window`` seconds: the operator's CPU time per polling cycle, its
   Kubernetes requests per minute by verb (the audit log), its Redis round trips (MONITOR,
   commands sent by its connections), its writes (must be zero) and its memory (RSS);
3. **changing backlogs** for ``--window`` seconds: every polling interval ``--churn`` queues get
   a backlog (3 replicas' worth) and ``--churn`` others are drained, so replicas rise and fall
   (the worker pods stay Pending: no kubelet); the same figures;
4. **unrelated objects**: ``--unrelated`` Deployments (0 replicas) and as many Services, in 20
   other namespaces, with nothing of ours on them: the operator's CPU while they are created
   and their controllers settle, then its memory and CPU at rest beside them.

Designs: ``server-side`` is the operator as shipped (its watches of Deployments, CronJobs and
Services carry the label selector ``app.kubernetes.io/managed-by=antre-operator``, so the API
server sends only our children); ``client-side`` is the same operator with that selector
removed (``bench/_client_side_watches.py``), as it was before: every object of those kinds in
the cluster reaches kopf, which filters by label in the process.

    python bench/operator_scale.py                                   # both designs, ~15 min
    python bench/operator_scale.py --designs server-side --jobqueues 50 --window 30
"""

from __future__ import annotations

import argparse
import collections
import concurrent.futures
import dataclasses
import os
import random
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import redis

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench import _harness as h
from bench import _results
from tests.e2e.api_users import ApiUser
from tests.e2e.audit import WRITE_VERBS
from tests.e2e.control_plane import REPO_ROOT, ControlPlane, KubeBinaries
from tests.e2e.processes import LoggedProcess

NS = "bench"
OPERATOR_USER = "antre-operator"
DESIGNS = {
    "server-side": ["-m", "antre_operator"],
    "client-side": [str(Path(__file__).resolve().parent / "_client_side_watches.py")],
}
UNRELATED_NAMESPACES = 20
CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


# -- the operator process, from /proc ----------------------------------------------------------------

def cpu_s(pid: int) -> float:
    """User + system CPU seconds of the process (its threads included)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLOCK_TICKS


def memory_mib(pid: int) -> tuple[float, float]:
    """(resident now, peak resident) in MiB."""
    status = dict(line.split(":", 1) for line in Path(f"/proc/{pid}/status").read_text().splitlines()
                  if ":" in line)
    return (int(status["VmRSS"].split()[0]) / 1024, int(status["VmHWM"].split()[0]) / 1024)


# -- Redis round trips ------------------------------------------------------------------------------

class Monitor:
    """Counts the commands Redis receives from clients (not those run inside scripts), leaving out
    the connections given to :meth:`ignore` (the bench's own)."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.counts: collections.Counter[str] = collections.Counter()
        self.counting = False
        self.ignored: set[str] = set()
        self._thread = threading.Thread(target=self._watch, daemon=True)
        self._ready = threading.Event()

    def start(self) -> Monitor:
        self._thread.start()
        self._ready.wait(5)
        return self

    def ignore(self, client: Any) -> None:
        self.ignored.add(client.client_info()["addr"].rsplit(":", 1)[1])

    def _watch(self) -> None:
        # No socket timeout: Redis may well say nothing for longer than redis-py's default 5 s.
        reader = redis.Redis.from_url(self.url, decode_responses=True, socket_timeout=None)
        with reader.monitor() as monitor:  # type: ignore[no-untyped-call]
            self._ready.set()
            for entry in monitor.listen():
                if "monitor-stop" in entry["command"]:
                    return
                if (self.counting and entry["client_type"] == "tcp"
                        and entry["client_port"] not in self.ignored):
                    self.counts[entry["command"].split(" ", 1)[0].upper()] += 1

    def stop(self) -> None:
        h.client(self.url).echo("monitor-stop")
        self._thread.join(10)


# -- one run ----------------------------------------------------------------------------------------

@dataclasses.dataclass
class Window:
    seconds: float
    cycles: float
    cpu_s: float
    requests: dict[str, int]
    round_trips: int
    rss_mib: float
    peak_mib: float

    @property
    def writes(self) -> int:
        return sum(n for verb, n in self.requests.items() if verb in WRITE_VERBS)

    def per_minute(self, n: float) -> float:
        return n * 60 / self.seconds


@dataclasses.dataclass
class Result:
    design: str
    ready_s: float = 0.0
    rest: Window | None = None
    changing: Window | None = None
    unrelated_cpu_s: float = 0.0
    unrelated_s: float = 0.0
    unrelated_requests: dict[str, int] = dataclasses.field(default_factory=dict)
    rest_unrelated: Window | None = None

    @property
    def unrelated_extra_cpu_s(self) -> float:
        """CPU while the unrelated objects appeared, beyond the polling that went on meanwhile
        (the at-rest rate)."""
        assert self.rest is not None
        return self.unrelated_cpu_s - self.rest.cpu_s / self.rest.seconds * self.unrelated_s

    @property
    def unrelated_extra_mib(self) -> float:
        assert self.rest is not None and self.rest_unrelated is not None
        return self.rest_unrelated.rss_mib - self.rest.rss_mib


def jobqueue(name: str, interval: int) -> dict[str, Any]:
    return {"apiVersion": "antre.dev/v1alpha1", "kind": "JobQueue",
            "metadata": {"name": name, "namespace": NS},
            "spec": {"redis": {"urlSecretRef": {"name": "redis-url", "key": "url"}},
                     "worker": {"handlers": "antre.example_handlers"},
                     "reaper": {"suspend": True},
                     "autoscaling": {"minReplicas": 0, "maxReplicas": 3,
                                     "targetBacklogPerReplica": 10,
                                     "pollingIntervalSeconds": interval,
                                     "scaleDownStabilizationSeconds": 10,
                                     "cooldownSeconds": 10}}}


def unrelated_objects(count: int) -> Iterator[tuple[str, dict[str, Any]]]:
    """(collection path, body) of ``count`` Deployments and ``count`` Services of someone else."""
    for i in range(count):
        ns = f"others-{i % UNRELATED_NAMESPACES}"
        labels = {"app": f"app-{i}", "team": "others"}
        yield f"/apis/apps/v1/namespaces/{ns}/deployments", {
            "apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": f"app-{i}", "labels": labels},
            "spec": {"replicas": 0, "selector": {"matchLabels": labels}, "template": {
                "metadata": {"labels": labels},
                "spec": {"containers": [{"name": "app", "image": "registry.example/app:1"}]}}}}
        yield f"/api/v1/namespaces/{ns}/services", {
            "apiVersion": "v1", "kind": "Service", "metadata": {"name": f"app-{i}", "labels": labels},
            "spec": {"selector": labels, "ports": [{"port": 80}]}}


class Bench:
    def __init__(self, args: argparse.Namespace, design: str, workdir: Path) -> None:
        self.args = args
        self.design = design
        self.workdir = workdir
        self.plane = ControlPlane(KubeBinaries.fetch(), workdir / "control-plane",
                                  crds=[REPO_ROOT / "crds"])
        self.names = [f"q{i:03d}" for i in range(args.jobqueues)]

    def operator_requests(self, start: int) -> dict[str, int]:
        """The operator's requests from audit log offset ``start`` on, by verb; writes also by
        verb and resource (``"patch deployments"``)."""
        counts: collections.Counter[str] = collections.Counter()
        for request in self.plane.audit.requests(start=start):
            if request.user == OPERATOR_USER:
                counts[request.verb] += 1
                if request.is_write:
                    counts[f"{request.verb} {request.resource}"] += 1
        return dict(counts)

    def quiet(self, seconds: float, timeout_s: float) -> None:
        """Wait until the operator has written nothing for ``seconds``."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            start = self.plane.audit.end()
            time.sleep(seconds)
            requests = self.operator_requests(start)
            if not any(requests.get(verb) for verb in WRITE_VERBS):
                return
        print(f"  (still writing after {timeout_s:.0f} s; measuring anyway)", flush=True)

    def measure(self, seconds: float, during: Callable[[threading.Event], None] | None = None,
                ) -> Window:
        stop = threading.Event()
        driver = threading.Thread(target=during, args=(stop,), daemon=True) if during else None
        start, cpu, wall = self.plane.audit.end(), cpu_s(self.pid), time.monotonic()
        self.monitor.counts.clear()
        self.monitor.counting = True
        if driver:
            driver.start()
        time.sleep(seconds)
        stop.set()
        if driver:
            driver.join(30)
        self.monitor.counting = False
        elapsed = time.monotonic() - wall
        rss, peak = memory_mib(self.pid)
        return Window(seconds=elapsed, cycles=elapsed / self.args.interval,
                      cpu_s=cpu_s(self.pid) - cpu, requests=self.operator_requests(start),
                      round_trips=sum(self.monitor.counts.values()), rss_mib=rss, peak_mib=peak)

    def churn(self, stop: threading.Event) -> None:
        """Every polling interval, backlogs for some queues and drains for others."""
        import antre
        rng = random.Random(7)
        churn = min(self.args.churn, len(self.names) // 2)
        loaded: list[str] = []
        while not stop.is_set():
            for name in rng.sample([n for n in self.names if n not in loaded], churn):
                antre.Queue(self.driver, name).enqueue_many([("noop", {})] * 25)
                loaded.append(name)
            for name in loaded[:-churn] if len(loaded) > churn else []:
                self.driver.delete(antre.Queue(self.driver, name).settings.keys.ready)
            loaded = loaded[-churn:]
            stop.wait(self.args.interval)

    def drain_all(self) -> None:
        import antre
        for name in self.names:
            self.driver.delete(antre.Queue(self.driver, name).settings.keys.ready)

    def run(self) -> Result:
        result = Result(self.design)
        self.plane.start()
        server = h.start_redis()
        self.monitor = Monitor(server.url).start()
        # The bench's own commands go through one connection, left out of the counts.
        self.driver = redis.Redis.from_url(server.url, decode_responses=True,
                                           single_connection_client=True)
        self.monitor.ignore(self.driver)
        admin = ApiUser(self.plane.admin_kubeconfig)
        operator: LoggedProcess | None = None
        try:
            for ns in [NS, *(f"others-{i}" for i in range(UNRELATED_NAMESPACES))]:
                admin.request("POST", "/api/v1/namespaces",
                              {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}})
            admin.request("POST", f"/api/v1/namespaces/{NS}/secrets", {
                "apiVersion": "v1", "kind": "Secret", "metadata": {"name": "redis-url"},
                "stringData": {"url": server.url}})
            env = {k: v for k, v in os.environ.items() if not k.startswith("KUBERNETES_SERVICE")}
            env["KUBECONFIG"] = str(self.plane.user_kubeconfig(OPERATOR_USER, ["system:masters"]))
            env["PYTHONPATH"] = str(REPO_ROOT)
            operator = LoggedProcess("antre-operator", [
                sys.executable, *DESIGNS[self.design], "--all-namespaces", "--metrics-port", "0"],
                self.workdir / f"operator-{self.design}.log", env=env).start()
            operator.wait_for_log("Initial authentication has finished", timeout_s=60)
            self.pid = operator.pid
            started = time.monotonic()
            with concurrent.futures.ThreadPoolExecutor(8) as pool:
                list(pool.map(lambda n: admin.request(
                    "POST", f"/apis/antre.dev/v1alpha1/namespaces/{NS}/jobqueues",
                    jobqueue(n, self.args.interval)), self.names))

            def ready() -> bool:
                items = admin.request("GET", f"/apis/antre.dev/v1alpha1/namespaces/{NS}/jobqueues")
                return sum(any(c["type"] == "Ready" and c["status"] == "True"
                               for c in (i.get("status") or {}).get("conditions") or [])
                           for i in items["items"]) == len(self.names)

            operator.wait_until(ready, timeout_s=self.args.ready_timeout, what="every JobQueue Ready",
                                interval_s=1)
            result.ready_s = time.monotonic() - started
            print(f"[{self.design}] {len(self.names)} JobQueues Ready in {result.ready_s:.1f} s; "
                  f"settling", flush=True)
            self.quiet(10, 180)

            print(f"[{self.design}] at rest, {self.args.window:.0f} s", flush=True)
            result.rest = self.measure(self.args.window)
            print(f"[{self.design}] changing backlogs, {self.args.window:.0f} s", flush=True)
            result.changing = self.measure(self.args.window, self.churn)
            self.drain_all()
            self.quiet(10, 180)

            print(f"[{self.design}] creating {self.args.unrelated} unrelated Deployments and "
                  f"Services", flush=True)
            start, cpu, wall = self.plane.audit.end(), cpu_s(self.pid), time.monotonic()
            with concurrent.futures.ThreadPoolExecutor(8) as pool:
                list(pool.map(lambda item: admin.request("POST", item[0], item[1]),
                              unrelated_objects(self.args.unrelated)))
            time.sleep(self.args.settle)  # their controllers update their status meanwhile
            result.unrelated_cpu_s = cpu_s(self.pid) - cpu
            result.unrelated_s = time.monotonic() - wall
            result.unrelated_requests = self.operator_requests(start)
            print(f"[{self.design}] at rest beside them, {self.args.window:.0f} s", flush=True)
            result.rest_unrelated = self.measure(self.args.window)
        finally:
            if operator is not None:
                operator.stop(timeout_s=15)
            admin.close()
            self.monitor.stop()
            self.driver.close()
            server.stop()
            self.plane.stop()
        return result


# -- the report -------------------------------------------------------------------------------------

def by_verb(requests: dict[str, int]) -> dict[str, int]:
    return {key: n for key, n in requests.items() if " " not in key}


def writes_by_resource(requests: dict[str, int]) -> dict[str, int]:
    return {key: n for key, n in requests.items() if " " in key}


def counts(requests: dict[str, int], window: Window | None = None) -> str:
    scale = window.per_minute if window else (lambda n: n)
    return ", ".join(f"{key} {scale(n):,.1f}" for key, n in sorted(requests.items())) or "none"


def report(results: list[Result], args: argparse.Namespace) -> None:
    rows: list[list[str]] = []

    def row(label: str, value: Callable[[Result], str]) -> None:
        rows.append([label, *(value(r) for r in results)])

    def window_rows(title: str, pick: Callable[[Result], Window | None]) -> None:
        def w(r: Result) -> Window:
            window = pick(r)
            assert window is not None
            return window
        row(f"{title}: operator CPU per polling cycle",
            lambda r: f"{w(r).cpu_s / w(r).cycles * 1000:,.0f} ms "
                      f"({w(r).cpu_s / w(r).seconds * 100:.1f}% of a core)")
        row(f"{title}: CPU per JobQueue poll",
            lambda r: f"{w(r).cpu_s / w(r).cycles / args.jobqueues * 1000:.2f} ms")
        row(f"{title}: Kubernetes requests per minute",
            lambda r: f"{w(r).per_minute(sum(by_verb(w(r).requests).values())):,.1f} "
                      f"({counts(by_verb(w(r).requests), w(r))})")
        row(f"{title}: Kubernetes writes per minute",
            lambda r: f"{w(r).per_minute(w(r).writes):,.1f} "
                      f"({counts(writes_by_resource(w(r).requests), w(r))})")
        row(f"{title}: Redis round trips per cycle",
            lambda r: f"{w(r).round_trips / w(r).cycles:,.0f} "
                      f"({w(r).round_trips / w(r).cycles / args.jobqueues:.2f} per JobQueue)")
        row(f"{title}: operator memory (RSS)", lambda r: f"{w(r).rss_mib:.0f} MiB")

    row("JobQueues Ready after", lambda r: f"{r.ready_s:.1f} s")
    window_rows("at rest", lambda r: r.rest)
    window_rows("changing backlogs", lambda r: r.changing)
    row(f"operator CPU while {args.unrelated:,} Deployments + {args.unrelated:,} Services appear",
        lambda r: f"{r.unrelated_cpu_s:.2f} s in {r.unrelated_s:.0f} s, "
                  f"{r.unrelated_extra_cpu_s:+.2f} s beyond its rate at rest")
    row("its requests meanwhile", lambda r: counts(by_verb(r.unrelated_requests)))
    window_rows("at rest beside them", lambda r: r.rest_unrelated)
    row("memory beside them, against at rest", lambda r: f"{r.unrelated_extra_mib:+.0f} MiB")
    row("operator peak memory (VmHWM)", lambda r: f"{r.rest_unrelated.peak_mib:.0f} MiB"
        if r.rest_unrelated else "-")
    print()
    print(f"{args.jobqueues} JobQueues on one Redis, pollingIntervalSeconds {args.interval}, "
          f"windows of {args.window:.0f} s; {h.load_line()}")
    print(h.table(["figure", *(r.design for r in results)], rows))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--designs", default="client-side,server-side",
                        help="comma-separated, of: " + ", ".join(DESIGNS))
    parser.add_argument("--jobqueues", type=int, default=200)
    parser.add_argument("--interval", type=int, default=5, help="pollingIntervalSeconds")
    parser.add_argument("--window", type=float, default=60.0, help="seconds per measured phase")
    parser.add_argument("--churn", type=int, default=10,
                        help="queues given a backlog, and as many drained, per polling interval")
    parser.add_argument("--unrelated", type=int, default=2000,
                        help="unrelated Deployments, and as many Services")
    parser.add_argument("--settle", type=float, default=30.0,
                        help="seconds after creating the unrelated objects, still counted")
    parser.add_argument("--ready-timeout", type=float, default=600.0)
    args = parser.parse_args()
    designs = [d.strip() for d in args.designs.split(",") if d.strip()]
    unknown = [d for d in designs if d not in DESIGNS]
    if unknown:
        parser.error(f"--designs: got {unknown}; allowed: {', '.join(DESIGNS)}")
    results = []
    for design in designs:
        with tempfile.TemporaryDirectory(prefix=f"antre-opscale-{design}-") as tmp:
            results.append(Bench(args, design, Path(tmp)).run())
    report(results, args)
    return 0


if __name__ == "__main__":
    _results.run_and_keep(main, __file__)
