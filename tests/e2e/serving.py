"""The chart installed and its operator running as a local process, serving one namespace.

:func:`serve` does what a user does (``helm install``), then runs the operator with the chart's
own arguments and a token of the chart's ServiceAccount from the TokenRequest API, so every
request it makes is judged by the chart's RBAC. It also starts a redis-server of its own and
creates the Secret ``redis-url`` that README tells a user to create. On the suite's own control
plane the test kubelet (``kubelet.py``) runs the namespace's worker pods (or all its pods, or
none, as the test asks), so a JobQueue turns Ready only once a worker really runs; on a cluster
of your own, its kubelets run them.

Modes: ``cluster-wide`` (the chart's defaults: a ClusterRole) and ``namespaced``
(``operator.watchNamespaces`` set to the served namespace: Roles there).
"""

from __future__ import annotations

import contextlib
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import antre
from redis_servers import RedisServer

from .cluster import Cluster
from .installs import Install, helm_install
from .kubelet import TestKubelet
from .operator_process import OperatorProcess

MODES = ("cluster-wide", "namespaced")
#: The pods the test kubelet runs by default: the workers (the API's fixed port and the reaper's
#: runs each minute are left out unless a test asks for every pod with ``pods=""``).
WORKER_PODS = "app.kubernetes.io/component=worker"
#: Deadline for what the operator and the real controllers (garbage collector, namespace
#: controller) do: seconds normally, much longer on a loaded 2-core machine. Waits end as soon
#: as their condition holds.
SETTLE_S = 90.0


def condition(obj: dict[str, Any], kind: str) -> str | None:
    """The status of condition ``kind`` ("True", "False", "Unknown"), None when absent."""
    for entry in (obj.get("status") or {}).get("conditions") or []:
        if entry.get("type") == kind:
            return str(entry.get("status"))
    return None


class Served:
    """One install of the chart and the operator process serving ``namespace``."""

    def __init__(self, cluster: Cluster, install: Install, operator: OperatorProcess,
                 namespace: str, redis_server: RedisServer,
                 kubelet: TestKubelet | None) -> None:
        self.cluster = cluster
        self.install = install
        self.operator = operator
        self.namespace = namespace
        self.redis = redis_server
        self.kubelet = kubelet
        """Runs the namespace's pods on the suite's own control plane (None elsewhere)."""

    def restart_operator(self, log_path: Path) -> OperatorProcess:
        """A new operator process like the current one (same credentials and arguments), for a
        test that killed the current one; it becomes :attr:`operator`."""
        self.operator = self.operator.twin(log_path)
        self.operator.start()
        self.operator.wait_for_log("Initial authentication has finished", timeout_s=30)
        return self.operator

    def child(self, kind: str, name: str) -> dict[str, Any] | None:
        return self.cluster.get(kind, name, self.namespace)

    def wait_ready(self, name: str, timeout_s: float = SETTLE_S) -> dict[str, Any]:
        return self.wait_condition(name, "Ready", timeout_s=timeout_s)

    def wait_condition(self, name: str, kind: str, status: str = "True", *,
                       timeout_s: float = SETTLE_S) -> dict[str, Any]:
        return self.cluster.wait_for("jobqueue", name, self.namespace, timeout_s=timeout_s,
                                     until=lambda jq: condition(jq, kind) == status,
                                     what=f"JobQueue {name} {kind}={status}")

    def wait_child(self, kind: str, name: str, until: Any = bool,
                   what: str | None = None) -> dict[str, Any]:
        return self.cluster.wait_for(kind, name, self.namespace, until=until, timeout_s=SETTLE_S,
                                     what=what or f"{kind} {name}")

    def queue(self, name: str) -> antre.Queue:
        return antre.Queue.from_url(self.redis.url, name)

    def refusals(self) -> list[str]:
        """Log lines of requests the API server refused, and of errors: none when all is well."""
        errors = [line for line in self.operator.errors() if not self._expected(line)]
        kubelet = [f"test kubelet: {e}" for e in self.kubelet.errors()] if self.kubelet else []
        return self.operator.forbidden() + errors + kubelet

    @staticmethod
    def _expected(line: str) -> bool:
        # A JobQueue deleted while a step was running: its status patch meets a 404.
        return re.search(r"status not written: HTTP 404", line) is not None


@contextlib.contextmanager
def serve(cluster: Cluster, mode: str, workdir: Path, *, appendonly: bool = False,
          operator_values: dict[str, Any] | None = None,
          pods: str | None = WORKER_PODS) -> Iterator[Served]:
    """``appendonly``: the Redis keeps its data across a restart (the fault scenarios);
    ``operator_values``: more chart values under ``operator`` (e.g. its jobQueuePolicy);
    ``pods``: the label selector of the pods the test kubelet runs ("" every pod, None none:
    they stay Pending and no JobQueue with workers turns Ready)."""
    assert mode in MODES, mode
    namespace = cluster.create_namespace(f"jobs-{mode}")
    # Unique per call: the namespaces of an earlier install may still be terminating.
    release = f"antre-{mode}-{namespace.rsplit('-', 1)[1]}"
    operator_values = dict(operator_values or {})
    if mode == "namespaced":
        operator_values["watchNamespaces"] = [namespace]
    if not cluster.built:
        # A cluster with kubelets would start the chart's operator pod beside ours.
        operator_values["replicaCount"] = 0
    values = {"operator": operator_values} if operator_values else {}
    install = helm_install(cluster, release, f"{release}-system", values=values,
                           workdir=workdir)
    server = RedisServer("--maxmemory-policy", "noeviction", appendonly=appendonly).start()
    operator = OperatorProcess(
        cluster.service_account_kubeconfig(install.namespace, install.service_account),
        workdir / "operator.log", install.operator_args(), extra_env=install.operator_env())
    kubelet = None
    if cluster.control_plane is not None and pods is not None:
        kubelet = TestKubelet(cluster.control_plane, workdir / "kubelet", [namespace],
                              selector=pods or None)
    served: Served | None = None
    try:
        operator.start()
        # kopf logs this once the token has been accepted (it fails loudly otherwise).
        operator.wait_for_log("Initial authentication has finished", timeout_s=30)
        cluster.kubectl("create", "secret", "generic", "redis-url", "-n", namespace,
                        f"--from-literal=url={server.url}")
        if kubelet is not None:
            kubelet.start()
        served = Served(cluster, install, operator, namespace, server, kubelet)
        yield served
    finally:
        if served is not None:
            operator = served.operator  # a test may have started another one
        # JobQueues first, while the operator runs to release its finalizer: otherwise the
        # namespace would stay Terminating until some other operator process handles them.
        cluster.kubectl("delete", "jobqueues", "--all", "-n", namespace, "--wait=true",
                        "--timeout=60s", check=False)
        operator.stop(timeout_s=15)
        if kubelet is not None:
            # Its processes stopped and their pods deleted at once (not after each pod's grace
            # period); pods made after that are never bound and go with the namespace.
            kubelet.stop()
        cluster.helm("uninstall", release, "--namespace", install.namespace, "--wait")
        cluster.delete_namespace(namespace)
        cluster.delete_namespace(install.namespace)
        server.stop()
