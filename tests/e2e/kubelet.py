"""A test kubelet: the pods of some namespaces run as local processes on one Node.

The suite's control plane has no scheduler and no kubelet (``control_plane.py``); this fixture is
both, for the pods of the namespaces it serves, so what the operator renders runs for real:
the ReplicaSet controller decides which pods exist, and each worker pod is a real ``antre worker``.

* **Node.** It registers Node ``antre-e2e-node`` (Ready) as ``system:node:antre-e2e-node`` in
  ``system:nodes``, a kubelet's identity: the Node authorizer judges its requests, so it reads a
  Secret only for a pod bound to it.
* **Scheduling.** As ``system:kube-scheduler`` it binds each pending pod of its namespaces (those
  matching its label selector, when given) to that Node (``pods/binding``); others stay Pending.
* **Running.** For each pod bound to the Node it starts the container's ``command`` + ``args``
  (``$(VAR)`` expanded) as a local process whose environment is the pod's, resolved from the API
  server: plain values, ``secretKeyRef``, ``configMapKeyRef`` and ``fieldRef``
  (``metadata.name`` gives ``POD_NAME``). It reports the pod Running through ``pods/status``,
  and Ready once the readiness probe's ``httpGet`` answers 2xx (tried every 0.2 s until then,
  every ``periodSeconds`` after; a failure makes it not Ready again). A container that exits is
  restarted as ``restartPolicy`` says: ``Always`` with a kubelet's back-off (at once, then 10 s
  doubling up to 300 s), reported as a kubelet does: ``waiting`` with reason
  ``CrashLoopBackOff`` during the back-off, the exit in ``lastState.terminated`` (its
  ``message`` the tail of the run's output under ``terminationMessagePolicy:
  FallbackToLogsOnError``: the last 80 lines, at most 2048 bytes) and ``restartCount``;
  ``Never`` makes the pod Succeeded or Failed by its exit code (the reaper CronJob's
  ``antre reaper --once``).
* **Deleting.** When the API server marks a pod for deletion, it sends the process SIGTERM,
  waits up to ``deletionGracePeriodSeconds``, sends SIGKILL if it still runs, then deletes the
  pod with grace period 0 (uid precondition), as a kubelet does.

* **API access.** A container that mounts a projected ``serviceAccountToken`` volume (the
  chart's ``kube-api-access``, what ``automountServiceAccountToken`` would mount) gets what a
  client in it would read there, as a kubeconfig named by ``KUBECONFIG`` (a local process
  cannot see ``/var/run/secrets``; the Kubernetes client falls back to it): the API server, its
  CA and a token of the pod's ServiceAccount bound to the pod, asked of the TokenRequest API as
  the Node (the Node authorizer allows it only for the ServiceAccount of a pod bound to it).

What it does not emulate: images (every container runs this checkout's code from the test's
virtual environment: ``command[0]`` is looked up in its ``bin/`` first, ``PYTHONPATH`` names
this checkout's packages (the environment's editable install may point at another worktree),
the image's environment is ``PYTHONUNBUFFERED``/``PYTHONDONTWRITEBYTECODE`` as in
worker_image/Dockerfile, its working directory is a fresh directory per pod); liveness and
startup probes; resource requests and limits (nothing is throttled or OOM-killed); volumes
(mounts are ignored, but for the service-account token above);
``securityContext`` (processes run as the test's user); init containers and more than one
container per pod; pod networking (pods share this machine's loopback, so each pod gets a free
local port for the worker's metrics port and ``ANTRE_METRICS_PORT`` says which); Node heartbeats,
leases and eviction; ``preStop`` hooks; ``kubectl logs`` (each pod's output goes to
``<workdir>/<namespace>_<pod>.log`` instead, see :meth:`TestKubelet.log`).

Everything it does is recorded in :attr:`TestKubelet.events` with the wall-clock time, for the
scenarios' timelines.
"""

from __future__ import annotations

import base64
import contextlib
import dataclasses
import os
import re
import signal
import sys
import threading
import time
import urllib.request
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any, Final

from redis_servers import free_port

from . import kubeconfigs
from .api_users import ApiError, ApiUser
from .control_plane import REPO_ROOT, ControlPlane
from .processes import LoggedProcess

NODE_NAME: Final = "antre-e2e-node"
#: What the worker image's Dockerfile puts in every container's environment, and this
#: checkout's code where the images install the package.
IMAGE_ENV: Final = {"PYTHONUNBUFFERED": "1", "PYTHONDONTWRITEBYTECODE": "1",
                    "PYTHONPATH": f"{REPO_ROOT / 'worker_image'}:{REPO_ROOT / 'operator'}"}
#: The worker listens on the port this variable names (its only listening port).
PORT_VARIABLE: Final = "ANTRE_METRICS_PORT"
#: The kubelet's restart back-off: the first restart at once, then 10 s doubling to 300 s.
BACKOFF_START_S: Final = 10.0
BACKOFF_MAX_S: Final = 300.0
#: How much of a failed run's output FallbackToLogsOnError makes its termination message.
TERMINATION_LOG_LINES: Final = 80
TERMINATION_LOG_BYTES: Final = 2048
TICK_S: Final = 0.1
UNREADY_PROBE_S: Final = 0.2
#: How long after a pod's first start attempt a 403 from the Node authorizer means "not yet".
AUTHORIZER_GRACE_S: Final = 10.0
_VARIABLE_RE: Final = re.compile(r"\$\$|\$\(([A-Za-z_][A-Za-z0-9_.-]*)\)")


class ContainerConfigError(Exception):
    """The container cannot start yet (a Secret or ConfigMap missing): retried, as a kubelet
    retries ``CreateContainerConfigError``."""


class NodeNotYetAuthorized(ContainerConfigError):
    """The Node authorizer refused a Secret, ConfigMap or token of a pod just bound: its graph
    has not seen the binding yet. A kubelet's object cache waits for it (the pod stays
    ``ContainerCreating``), so for ``AUTHORIZER_GRACE_S`` this is not reported as an error."""


@dataclasses.dataclass(frozen=True)
class KubeletEvent:
    at: float
    """Wall-clock time (time.time())."""
    namespace: str
    pod: str
    what: str
    """bound, started, ready, unready, exited, sigterm, sigkill, deleted."""
    detail: str = ""


def expand(text: str, env: Mapping[str, str]) -> str:
    """``$(VAR)`` replaced by its value when defined, ``$$`` by ``$`` (the kubelet's rules)."""
    def replace(match: re.Match[str]) -> str:
        if match.group(0) == "$$":
            return "$"
        return env.get(match.group(1), match.group(0))
    return _VARIABLE_RE.sub(replace, text)


def field_value(pod: Mapping[str, Any], path: str) -> str:
    """The value of a ``fieldRef`` the Downward API allows in env."""
    meta, spec = pod["metadata"], pod["spec"]
    values = {
        "metadata.name": meta.get("name"), "metadata.namespace": meta.get("namespace"),
        "metadata.uid": meta.get("uid"), "spec.nodeName": spec.get("nodeName"),
        "spec.serviceAccountName": spec.get("serviceAccountName"),
        "status.podIP": "127.0.0.1", "status.hostIP": "127.0.0.1",
    }
    match = re.fullmatch(r"metadata\.(labels|annotations)\['(.+)'\]", path)
    if match:
        return str((meta.get(match.group(1)) or {}).get(match.group(2), ""))
    if path not in values:
        raise ContainerConfigError(f"fieldRef {path} is not emulated")
    return str(values[path] or "")


@dataclasses.dataclass
class PodRun:
    """A pod this kubelet runs: its process and what it last reported."""

    namespace: str
    name: str
    uid: str
    log_path: Path
    workdir: Path
    process: LoggedProcess | None = None
    port: int | None = None
    """The local port standing in for the readiness probe's container port."""
    started_at: str = ""
    log_offset: int = 0
    """Where the current run's output starts in ``log_path`` (runs append to one file)."""
    restarts: int = 0
    restart_at: float = 0.0
    backoff_s: float = 0.0
    ready: bool = False
    next_probe_at: float = 0.0
    last_exit: int | None = None
    last_termination: dict[str, Any] | None = None
    """``lastState.terminated`` as a kubelet reports it, after a restart."""
    finished: bool = False
    """A container that will not restart exited (restartPolicy Never or OnFailure)."""
    signalled_at: float | None = None
    kill_at: float | None = None
    config_error: str | None = None
    first_attempt_at: float | None = None
    deleted: bool = False
    """The kubelet deleted the pod (grace period 0)."""
    gone: bool = False
    """The pod no longer exists in the API; its log stays."""
    reported: dict[str, Any] | None = None
    transitions: dict[str, tuple[str, str]] = dataclasses.field(default_factory=dict)
    """Condition type -> (status, when it took that status), for lastTransitionTime."""


def _now_rfc3339() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


class TestKubelet:
    """See the module docstring. ``start()`` it, ``stop()`` it; it serves ``namespaces``."""

    __test__ = False  # not a test class, whatever pytest thinks of the name

    def __init__(self, plane: ControlPlane, workdir: Path, namespaces: Iterable[str], *,
                 selector: str | None = None) -> None:
        """``selector``: a label selector; only matching pods are bound and run."""
        self.workdir = workdir
        self.namespaces = set(namespaces)
        self.selector = selector
        self.node_kubeconfig = plane.user_kubeconfig(f"system:node:{NODE_NAME}", ["system:nodes"])
        self.node = ApiUser(self.node_kubeconfig)
        self.server, self.ca = plane.server, plane.ca.pair.cert
        self.scheduler = ApiUser(plane.user_kubeconfig("system:kube-scheduler"))
        self.bin_dir = Path(sys.executable).parent
        self.events: list[KubeletEvent] = []
        self._pods: dict[str, dict[str, Any]] = {}
        """The latest view of each pod bound to the Node, by uid (from the watch)."""
        self._runs: dict[str, PodRun] = {}
        self._lock = threading.Lock()
        self._wake = threading.Event()
        self._stopping = threading.Event()
        self._threads: list[threading.Thread] = []
        self._errors: list[str] = []

    # -- life ---------------------------------------------------------------------------------------

    def start(self) -> TestKubelet:
        self.workdir.mkdir(parents=True, exist_ok=True)
        self._register_node()
        for name, target in (("bind", self._bind_loop), ("watch", self._watch_loop),
                             ("sync", self._sync_loop)):
            thread = threading.Thread(target=target, name=f"test-kubelet-{name}", daemon=True)
            thread.start()
            self._threads.append(thread)
        return self

    def stop(self) -> None:
        """Stop every process (SIGTERM, then SIGKILL after 5 s), delete their pods at once, then
        the Node; pods left on a deleted Node are removed by the pod garbage collector."""
        self._stopping.set()
        self._wake.set()
        self.node.close()
        self.scheduler.close()
        for thread in self._threads:
            thread.join(timeout=10)
        with self._lock:
            runs = list(self._runs.values())
        alive = [run.process for run in runs if run.process is not None and run.process.alive()]
        for process in alive:
            with contextlib.suppress(ProcessLookupError):
                os.kill(process.pid, signal.SIGTERM)
        for process in alive:
            process.stop(timeout_s=5)
        api = ApiUser(self.node_kubeconfig)  # the first client is closed with its watches
        for run in runs:
            if not run.gone:
                with contextlib.suppress(Exception):
                    self._delete_pod(run, api)
        with contextlib.suppress(Exception):
            api.request("DELETE", f"/api/v1/nodes/{NODE_NAME}", expect=(200, 202, 404))
        api.close()

    def errors(self) -> list[str]:
        """Unexpected failures of the kubelet's own loops (a test asserts there are none)."""
        return list(self._errors)

    # -- what tests ask -----------------------------------------------------------------------------

    def runs(self, namespace: str, *, gone: bool = False) -> list[PodRun]:
        """The pods run in ``namespace``; with ``gone``, those deleted since too."""
        with self._lock:
            return [run for run in self._runs.values()
                    if run.namespace == namespace and (gone or not run.gone)]

    def run_of(self, namespace: str, pod: str) -> PodRun | None:
        return next((r for r in self.runs(namespace, gone=True) if r.name == pod), None)

    def log(self, namespace: str, pod: str) -> str:
        path = self.workdir / f"{namespace}_{pod}.log"
        return path.read_text(errors="replace") if path.exists() else ""

    def events_of(self, namespace: str, what: str | None = None) -> list[KubeletEvent]:
        return [e for e in list(self.events)
                if e.namespace == namespace and (what is None or e.what == what)]

    def kill(self, namespace: str, pod: str, sig: int = signal.SIGKILL) -> None:
        """Signal the pod's process from outside (an OOM kill, a crash); the kubelet then
        restarts it as restartPolicy says."""
        run = self.run_of(namespace, pod)
        assert run is not None and run.process is not None and run.process.alive(), pod
        os.kill(run.process.pid, sig)
        self._record(run, "killed", signal.Signals(sig).name)

    # -- the Node and the scheduler -------------------------------------------------------------------

    def _register_node(self) -> None:
        node = {"apiVersion": "v1", "kind": "Node", "metadata": {
            "name": NODE_NAME, "labels": {"kubernetes.io/hostname": NODE_NAME,
                                          "kubernetes.io/os": "linux"}}}
        self.node.request("POST", "/api/v1/nodes", node, expect=(201, 409))
        capacity = {"cpu": str(os.cpu_count() or 2), "memory": "24Gi", "pods": "110"}
        status = {"status": {
            "capacity": capacity, "allocatable": capacity,
            "addresses": [{"type": "InternalIP", "address": "127.0.0.1"},
                          {"type": "Hostname", "address": NODE_NAME}],
            "conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady",
                            "message": "the test kubelet runs pods as local processes",
                            "lastHeartbeatTime": _now_rfc3339(),
                            "lastTransitionTime": _now_rfc3339()}],
            "nodeInfo": {"kubeletVersion": "test", "operatingSystem": "linux",
                         "architecture": "amd64", "containerRuntimeVersion": "local-process",
                         "kernelVersion": "", "osImage": "", "kubeProxyVersion": "",
                         "machineID": "", "systemUUID": "", "bootID": ""}}}
        self.node.request("PATCH", f"/api/v1/nodes/{NODE_NAME}/status", status,
                          content_type="application/merge-patch+json")

    def _bind_loop(self) -> None:
        """The scheduler: every pending pod of our namespaces goes to our Node."""
        try:
            query = {"fieldSelector": "spec.nodeName="}
            if self.selector:
                query["labelSelector"] = self.selector
            for kind, payload in self.scheduler.watch("/api/v1/pods", query):
                pods = payload if kind == "LIST" else [payload] if kind != "DELETED" else []
                for pod in pods:
                    self._bind(pod)
        except Exception as exc:  # pragma: no cover - reported by errors()
            if not self._stopping.is_set():
                self._errors.append(f"bind loop: {exc!r}")

    def _bind(self, pod: Mapping[str, Any]) -> None:
        meta = pod["metadata"]
        if meta["namespace"] not in self.namespaces or meta.get("deletionTimestamp"):
            return
        binding = {"apiVersion": "v1", "kind": "Binding",
                   "metadata": {"name": meta["name"], "uid": meta["uid"]},
                   "target": {"apiVersion": "v1", "kind": "Node", "name": NODE_NAME}}
        try:
            self.scheduler.request(
                "POST", f"/api/v1/namespaces/{meta['namespace']}/pods/{meta['name']}/binding",
                binding, expect=(201,))
        except ApiError as exc:
            if exc.status not in (404, 409):  # gone meanwhile, or bound already
                raise
            return
        self.events.append(KubeletEvent(time.time(), meta["namespace"], meta["name"], "bound"))

    # -- watching our pods ----------------------------------------------------------------------------

    def _watch_loop(self) -> None:
        try:
            for kind, payload in self.node.watch(
                    "/api/v1/pods", {"fieldSelector": f"spec.nodeName={NODE_NAME}"}):
                with self._lock:
                    if kind == "LIST":
                        self._pods = {p["metadata"]["uid"]: p for p in payload
                                      if p["metadata"]["namespace"] in self.namespaces}
                    elif payload["metadata"]["namespace"] not in self.namespaces:
                        continue
                    elif kind == "DELETED":
                        self._pods.pop(payload["metadata"]["uid"], None)
                    else:
                        self._pods[payload["metadata"]["uid"]] = payload
                self._wake.set()
        except Exception as exc:  # pragma: no cover - reported by errors()
            if not self._stopping.is_set():
                self._errors.append(f"watch loop: {exc!r}")

    # -- the sync loop ----------------------------------------------------------------------------------

    def _sync_loop(self) -> None:
        while not self._stopping.is_set():
            self._wake.wait(TICK_S)
            self._wake.clear()
            with self._lock:
                pods = dict(self._pods)
                uids = set(pods) | {uid for uid, run in self._runs.items() if not run.gone}
            for uid in uids:
                if self._stopping.is_set():
                    return
                try:
                    self._sync(uid, pods.get(uid))
                except Exception as exc:
                    self._errors.append(f"sync of pod {uid}: {exc!r}")

    def _sync(self, uid: str, pod: dict[str, Any] | None) -> None:
        run = self._runs.get(uid)
        if pod is None:  # deleted from the API: nothing may run for it any more
            if run is not None:
                if run.process is not None and run.process.alive():
                    run.process.stop(timeout_s=0.1, sig=signal.SIGKILL)
                run.gone = True
            return
        meta = pod["metadata"]
        if run is None:
            run = PodRun(namespace=meta["namespace"], name=meta["name"], uid=uid,
                         log_path=self.workdir / f"{meta['namespace']}_{meta['name']}.log",
                         workdir=self.workdir / "pods" / uid)
            with self._lock:
                self._runs[uid] = run
        if meta.get("deletionTimestamp"):
            self._terminate(run, pod)
            return
        alive = run.process is not None and run.process.alive()
        if run.process is not None and not alive and not run.finished:
            self._exited(run, pod)
        if run.finished:
            pass
        elif run.process is None or not run.process.alive():
            if time.monotonic() >= run.restart_at:
                self._start_container(run, pod)
        elif time.monotonic() >= run.next_probe_at:
            self._probe(run, pod)
        self._report(run, pod)

    def _container(self, pod: Mapping[str, Any]) -> dict[str, Any]:
        containers = pod["spec"]["containers"]
        assert len(containers) == 1, "the test kubelet runs one container per pod"
        return dict(containers[0])

    def _start_container(self, run: PodRun, pod: Mapping[str, Any]) -> None:
        container = self._container(pod)
        now = time.monotonic()
        if run.first_attempt_at is None:
            run.first_attempt_at = now
        try:
            env = self._environment(pod, container)
        except NodeNotYetAuthorized as exc:
            if now - run.first_attempt_at < AUTHORIZER_GRACE_S:
                run.restart_at = now + TICK_S
                return
            run.config_error = str(exc)
            run.restart_at = now + 0.5
            return
        except ContainerConfigError as exc:
            run.config_error = str(exc)
            run.restart_at = now + 0.5
            return
        run.config_error = None
        ports = container.get("ports") or []
        if ports:
            run.port = run.port or free_port()
            if PORT_VARIABLE in env:
                env[PORT_VARIABLE] = str(run.port)
        argv = [expand(a, env) for a in [*(container.get("command") or []),
                                          *(container.get("args") or [])]]
        assert argv, "the test kubelet has no image ENTRYPOINT to fall back on"
        if (self.bin_dir / argv[0]).exists():
            argv[0] = str(self.bin_dir / argv[0])
        run.workdir.mkdir(parents=True, exist_ok=True)
        run.log_offset = run.log_path.stat().st_size if run.log_path.exists() else 0
        env.setdefault("PATH", f"{self.bin_dir}:/usr/local/bin:/usr/bin:/bin")
        env.setdefault("HOME", str(run.workdir))
        env["HOSTNAME"] = run.name
        run.process = LoggedProcess(run.name, argv, run.log_path, env=env,
                                    cwd=run.workdir).start()
        run.started_at = _now_rfc3339()
        run.ready = False
        run.next_probe_at = time.monotonic() + UNREADY_PROBE_S
        self._record(run, "started", f"pid {run.process.pid}, restart {run.restarts}")

    def _environment(self, pod: Mapping[str, Any], container: Mapping[str, Any]) -> dict[str, str]:
        env: dict[str, str] = dict(IMAGE_ENV)
        namespace = pod["metadata"]["namespace"]
        for entry in container.get("env") or []:
            if "value" in entry or "valueFrom" not in entry:
                env[entry["name"]] = expand(str(entry.get("value", "")), env)
                continue
            source = entry["valueFrom"]
            if "fieldRef" in source:
                env[entry["name"]] = field_value(pod, source["fieldRef"]["fieldPath"])
            elif "secretKeyRef" in source or "configMapKeyRef" in source:
                value = self._key_ref(namespace, source)
                if value is not None:
                    env[entry["name"]] = value
            else:
                raise ContainerConfigError(f"env {entry['name']}: {sorted(source)} not emulated")
        if container.get("envFrom"):
            raise ContainerConfigError("envFrom is not emulated")
        kubeconfig = self._api_access(pod, container)
        if kubeconfig is not None:
            env["KUBECONFIG"] = str(kubeconfig)
        return env

    def _api_access(self, pod: Mapping[str, Any], container: Mapping[str, Any]) -> Path | None:
        """The kubeconfig standing in for a mounted service-account token volume (see the
        module docstring), None when the container mounts none."""
        mounted = {mount["name"] for mount in container.get("volumeMounts") or []}
        source = next((s["serviceAccountToken"] for volume in pod["spec"].get("volumes") or []
                       if volume["name"] in mounted
                       for s in (volume.get("projected") or {}).get("sources") or []
                       if "serviceAccountToken" in s), None)
        if source is None:
            return None
        meta = pod["metadata"]
        account = pod["spec"].get("serviceAccountName") or "default"
        spec: dict[str, Any] = {
            "expirationSeconds": int(source.get("expirationSeconds", 3600)),
            "boundObjectRef": {"apiVersion": "v1", "kind": "Pod", "name": meta["name"],
                               "uid": meta["uid"]}}
        if source.get("audience"):
            spec["audiences"] = [source["audience"]]
        what = f"a token of serviceaccount {meta['namespace']}/{account}"
        try:
            answer = self.node.request(
                "POST", f"/api/v1/namespaces/{meta['namespace']}/serviceaccounts/{account}/token",
                {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "spec": spec})
        except ApiError as exc:
            if exc.status == 403:
                raise NodeNotYetAuthorized(f"{what}: {exc}") from None
            raise ContainerConfigError(f"{what}: {exc}") from None
        return kubeconfigs.write(
            self.workdir / "pods" / meta["uid"] / "kube-api-access.kubeconfig",
            server=self.server, ca=self.ca, namespace=meta["namespace"],
            user=kubeconfigs.token_user(answer["status"]["token"]))

    def _key_ref(self, namespace: str, source: Mapping[str, Any]) -> str | None:
        secret = "secretKeyRef" in source
        ref = source["secretKeyRef" if secret else "configMapKeyRef"]
        kind = "secrets" if secret else "configmaps"
        try:
            obj = self.node.request("GET", f"/api/v1/namespaces/{namespace}/{kind}/{ref['name']}")
        except ApiError as exc:
            if exc.status == 403:
                raise NodeNotYetAuthorized(f"{kind} {ref['name']}: {exc}") from None
            # 404: not created yet.
            if ref.get("optional"):
                return None
            raise ContainerConfigError(f"{kind} {ref['name']}: {exc}") from None
        data = obj.get("data") or {}
        if ref["key"] not in data:
            if ref.get("optional"):
                return None
            raise ContainerConfigError(f"{kind} {ref['name']} has no key {ref['key']}")
        value = data[ref["key"]]
        return base64.b64decode(value).decode() if secret else str(value)

    def _probe(self, run: PodRun, pod: Mapping[str, Any]) -> None:
        probe = self._container(pod).get("readinessProbe") or {}
        get = probe.get("httpGet")
        if get is None:
            ready = True
        else:
            try:
                url = f"http://127.0.0.1:{run.port}{get.get('path', '/')}"
                with urllib.request.urlopen(url, timeout=probe.get("timeoutSeconds", 1)) as r:
                    ready = 200 <= r.status < 400
            except OSError:
                ready = False
        if ready != run.ready:
            run.ready = ready
            self._record(run, "ready" if ready else "unready")
        run.next_probe_at = time.monotonic() + (probe.get("periodSeconds", 10) if ready
                                                else UNREADY_PROBE_S)

    def _exited(self, run: PodRun, pod: Mapping[str, Any]) -> None:
        assert run.process is not None and run.process.process is not None
        code = run.process.process.returncode
        run.last_exit = 128 - code if code < 0 else code  # -9 (SIGKILL) is reported as 137
        run.ready = False
        run.last_termination = self._termination(run, pod)
        self._record(run, "exited", f"exit code {run.last_exit}")
        policy = pod["spec"].get("restartPolicy", "Always")
        if policy == "Never" or (policy == "OnFailure" and run.last_exit == 0):
            run.finished = True
            return
        delay = 0.0 if run.restarts == 0 else min(BACKOFF_START_S * 2 ** (run.restarts - 1),
                                                  BACKOFF_MAX_S)
        run.restarts += 1
        run.backoff_s = delay
        run.restart_at = time.monotonic() + delay
        run.process = None

    def _termination(self, run: PodRun, pod: Mapping[str, Any]) -> dict[str, Any]:
        """``terminated`` of the run that just ended, with the kubelet's termination message:
        the tail of the run's output when the policy falls back to logs on an error."""
        code = run.last_exit
        terminated: dict[str, Any] = {"exitCode": code,
                                      "reason": "Completed" if code == 0 else "Error",
                                      "startedAt": run.started_at, "finishedAt": _now_rfc3339()}
        policy = self._container(pod).get("terminationMessagePolicy")
        if code and policy == "FallbackToLogsOnError":
            with run.log_path.open("rb") as log:
                log.seek(run.log_offset)
                output = log.read().decode(errors="replace")
            tail = "\n".join(output.splitlines()[-TERMINATION_LOG_LINES:])
            terminated["message"] = tail.encode()[-TERMINATION_LOG_BYTES:].decode(errors="ignore")
        return terminated

    def _terminate(self, run: PodRun, pod: Mapping[str, Any]) -> None:
        """SIGTERM, the grace period, SIGKILL, then the pod is deleted for good."""
        process = run.process
        if process is not None and process.alive():
            now = time.monotonic()
            if run.signalled_at is None:
                grace = pod["metadata"].get("deletionGracePeriodSeconds")
                grace = 30 if grace is None else int(grace)
                run.signalled_at, run.kill_at = now, now + grace
                os.kill(process.pid, signal.SIGTERM)
                self._record(run, "sigterm", f"grace period {grace} s")
            elif run.kill_at is not None and now >= run.kill_at:
                os.kill(process.pid, signal.SIGKILL)
                run.kill_at = None
                self._record(run, "sigkill", "the grace period ran out")
            return
        if process is not None and not run.finished and run.last_exit is None:
            code = process.process.returncode if process.process else None
            run.last_exit = None if code is None else (128 - code if code < 0 else code)
            self._record(run, "exited", f"exit code {run.last_exit}")
        if not run.deleted:
            self._delete_pod(run, self.node)
            run.deleted = True
            self._record(run, "deleted")

    @staticmethod
    def _delete_pod(run: PodRun, api: ApiUser) -> None:
        api.request("DELETE", f"/api/v1/namespaces/{run.namespace}/pods/{run.name}",
                    {"apiVersion": "v1", "kind": "DeleteOptions", "gracePeriodSeconds": 0,
                     "preconditions": {"uid": run.uid}}, expect=(200, 202, 404, 409))

    # -- status -----------------------------------------------------------------------------------------

    def _status(self, run: PodRun, pod: Mapping[str, Any]) -> dict[str, Any]:
        container = self._container(pod)
        state: dict[str, Any]
        last: dict[str, Any] = {}
        if run.process is not None and run.process.alive():
            state = {"running": {"startedAt": run.started_at}}
            if run.restarts and run.last_termination is not None:
                last = {"terminated": run.last_termination}
        elif run.process is None and run.restarts and run.last_termination is not None:
            # Exited and waiting to be restarted: a kubelet's CrashLoopBackOff.
            state = {"waiting": {"reason": "CrashLoopBackOff", "message":
                                 f"back-off {run.backoff_s:.0f}s restarting failed container="
                                 f"{container['name']} pod={run.name}_{run.namespace}({run.uid})"}}
            last = {"terminated": run.last_termination}
        elif run.last_exit is not None:
            state = {"terminated": run.last_termination or {"exitCode": run.last_exit}}
        else:
            reason = "CreateContainerConfigError" if run.config_error else "ContainerCreating"
            state = {"waiting": {"reason": reason, "message": run.config_error or ""}}
        if run.finished:
            phase = "Succeeded" if run.last_exit == 0 else "Failed"
        elif run.started_at:
            phase = "Running"
        else:
            phase = "Pending"
        ready = "True" if run.ready else "False"
        conditions = [{"type": kind, "status": value} for kind, value in (
            ("PodScheduled", "True"), ("Initialized", "True"),
            ("ContainersReady", ready), ("Ready", ready))]
        return {"phase": phase, "hostIP": "127.0.0.1", "podIP": "127.0.0.1",
                "podIPs": [{"ip": "127.0.0.1"}], "conditions": conditions,
                "containerStatuses": [{
                    "name": container["name"], "image": container.get("image", ""),
                    "imageID": "", "ready": run.ready, "restartCount": run.restarts,
                    "started": "running" in state, "state": state, "lastState": last}]}

    def _report(self, run: PodRun, pod: Mapping[str, Any]) -> None:
        """Patch pods/status when what the kubelet knows changed (never twice the same)."""
        status = self._status(run, pod)
        if status == run.reported:
            return
        now = _now_rfc3339()
        for condition in status["conditions"]:
            if run.transitions.get(condition["type"], ("",))[0] != condition["status"]:
                run.transitions[condition["type"]] = (condition["status"], now)
        sent = {**status, "startTime": (pod.get("status") or {}).get("startTime") or now,
                "conditions": [{**c, "lastTransitionTime": run.transitions[c["type"]][1]}
                               for c in status["conditions"]]}
        try:
            self.node.request("PATCH",
                              f"/api/v1/namespaces/{run.namespace}/pods/{run.name}/status",
                              {"status": sent}, content_type="application/merge-patch+json")
        except ApiError as exc:
            if exc.status != 404:
                raise
        run.reported = status

    def _record(self, run: PodRun, what: str, detail: str = "") -> None:
        self.events.append(KubeletEvent(time.time(), run.namespace, run.name, what, detail))

