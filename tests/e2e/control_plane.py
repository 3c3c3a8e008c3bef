"""A real Kubernetes control plane on loopback: etcd, kube-apiserver, kube-controller-manager.

The binaries come from ``scripts/fetch_kube.sh`` (built from Go modules, cached). The fixture
makes everything else in a temporary directory:

* a CA, the API server's serving certificate, client certificates for the admin
  (``system:masters``) and the controller manager, and the service-account signing key (so the
  TokenRequest API works and ServiceAccounts get tokens);
* etcd with a fresh data directory (no fsync: the data is thrown away anyway);
* kube-apiserver on 127.0.0.1 with ``--authorization-mode=Node,RBAC``, the
  OwnerReferencesPermissionEnforcement admission plugin (as OpenShift runs it: setting
  ``blockOwnerDeletion`` needs update on the owner's finalizers), ``--allow-privileged=true``
  (as kubeadm and the managed clusters run it, so a privileged pod is stopped by admission
  policies, not by the flag) and an audit log of every request at Metadata level (see
  ``audit.py``);
* the CRDs given (``kubectl apply -f``), before the controller manager starts, so its garbage
  collector knows them from the start (see :meth:`ControlPlane._install_crds`);
* kube-controller-manager with the controllers listed in :data:`DEFAULT_CONTROLLERS`, each
  under its own ServiceAccount (``--use-service-account-credentials``), as in a real cluster.

There is no scheduler and no kubelet: pods are created by the ReplicaSet, StatefulSet and Job
controllers and stay Pending unless a test binds and runs them itself.

:meth:`ControlPlane.start` waits for ``/readyz`` and for the controller manager to act (the
``default`` ServiceAccount appears); a component that dies or does not get there fails the start
with the tail of its log. :meth:`ControlPlane.stop` stops each process by its pid.
"""

from __future__ import annotations

import dataclasses
import json
import os
import ssl
import subprocess
import time
import urllib.request
from collections.abc import Sequence
from pathlib import Path

from redis_servers import free_port

from . import kubeconfigs, pki
from .audit import AuditLog
from .processes import LoggedProcess

REPO_ROOT = Path(__file__).resolve().parents[2]
FETCH_SCRIPT = REPO_ROOT / "scripts" / "fetch_kube.sh"

#: Controllers the suite relies on: Deployments -> ReplicaSets -> Pods, CronJobs -> Jobs, the
#: garbage collector (ownerReferences), namespaces (deletion), ServiceAccounts and their tokens,
#: the kube-root-ca.crt ConfigMap (projected service-account volumes), finished-Job cleanup,
#: PodDisruptionBudget status, pod garbage collection, and the aggregated ClusterRoles (admin,
#: edit, view: empty without it).
DEFAULT_CONTROLLERS: tuple[str, ...] = (
    "deployment-controller",
    "replicaset-controller",
    "statefulset-controller",
    "garbage-collector-controller",
    "cronjob-controller",
    "job-controller",
    "namespace-controller",
    "serviceaccount-controller",
    "serviceaccount-token-controller",
    "root-ca-certificate-publisher-controller",
    "ttl-after-finished-controller",
    "disruption-controller",
    "pod-garbage-collector-controller",
    "clusterrole-aggregation-controller",
)

SERVICE_CLUSTER_IP_RANGE = "10.96.0.0/16"
SERVICE_ACCOUNT_ISSUER = "https://kubernetes.default.svc.cluster.local"

AUDIT_POLICY = """\
apiVersion: audit.k8s.io/v1
kind: Policy
# One event per request when it completes; a watch also logs one when it starts.
omitStages: [RequestReceived]
rules:
  - level: Metadata
"""


@dataclasses.dataclass(frozen=True)
class KubeBinaries:
    apiserver: Path
    controller_manager: Path
    etcd: Path
    kubectl: Path

    @classmethod
    def fetch(cls) -> KubeBinaries:
        """Run scripts/fetch_kube.sh: instant once cached, a build of several minutes before.

        Its progress goes to this process's stderr (``pytest -s`` shows it)."""
        result = subprocess.run(["bash", str(FETCH_SCRIPT)], stdout=subprocess.PIPE, text=True,
                                check=False, timeout=3600)
        if result.returncode != 0:
            raise RuntimeError(f"{FETCH_SCRIPT} failed (exit {result.returncode}); run it "
                               f"yourself to see why")
        paths = dict(line.split("=", 1) for line in result.stdout.splitlines() if "=" in line)
        return cls(apiserver=Path(paths["KUBE_APISERVER"]),
                   controller_manager=Path(paths["KUBE_CONTROLLER_MANAGER"]),
                   etcd=Path(paths["ETCD"]), kubectl=Path(paths["KUBECTL"]))


class ControlPlane:
    """etcd + kube-apiserver + kube-controller-manager in ``workdir``; see the module doc."""

    def __init__(self, binaries: KubeBinaries, workdir: Path, *,
                 controllers: Sequence[str] = DEFAULT_CONTROLLERS,
                 apiserver_args: Sequence[str] = (), crds: Sequence[Path] = ()) -> None:
        self.binaries = binaries
        self.workdir = workdir
        self.controllers = tuple(controllers)
        self.apiserver_args = tuple(apiserver_args)
        self.crds = tuple(crds)
        self.pki_dir = workdir / "pki"
        self.logs_dir = workdir / "logs"
        self.port = free_port()
        self.server = f"https://127.0.0.1:{self.port}"
        self.audit = AuditLog(self.logs_dir / "audit.log")
        self.admin_kubeconfig = workdir / "admin.kubeconfig"
        self.processes: list[LoggedProcess] = []
        self.started_in_s: float | None = None
        self._ca: pki.CertificateAuthority | None = None

    # -- certificates and kubeconfigs ---------------------------------------------------------------

    @property
    def ca(self) -> pki.CertificateAuthority:
        assert self._ca is not None, "start() makes the CA"
        return self._ca

    def user_kubeconfig(self, user: str, groups: Sequence[str] = (), *,
                        path: Path | None = None, namespace: str | None = None) -> Path:
        """A kubeconfig that authenticates as ``user`` in ``groups`` with a client certificate
        (no RBAC comes with it: bind what the test grants)."""
        stem = "user-" + "".join(c if c.isalnum() else "-" for c in user)
        pair = self.ca.issue_client(stem, user, groups)
        path = path or self.workdir / "kubeconfigs" / f"{stem}.kubeconfig"
        return kubeconfigs.write(path, server=self.server, ca=self.ca.pair.cert,
                                 user=kubeconfigs.client_cert_user(pair.cert, pair.key),
                                 namespace=namespace)

    def _make_pki(self) -> tuple[pki.KeyPair, pki.KeyPair, pki.KeyPair]:
        self.pki_dir.mkdir(parents=True, exist_ok=True)
        self._ca = pki.CertificateAuthority(self.pki_dir)
        serving = self.ca.issue_serving(
            "apiserver", ["127.0.0.1", "localhost", "kubernetes", "kubernetes.default",
                          "kubernetes.default.svc", "kubernetes.default.svc.cluster.local"])
        admin = self.ca.issue_client("admin", "antre-e2e-admin", ["system:masters"])
        kubeconfigs.write(self.admin_kubeconfig, server=self.server, ca=self.ca.pair.cert,
                          user=kubeconfigs.client_cert_user(admin.cert, admin.key))
        controller_manager = self.ca.issue_client("controller-manager",
                                                  "system:kube-controller-manager")
        return serving, controller_manager, pki.write_signing_key(self.pki_dir)

    # -- processes ------------------------------------------------------------------------------------

    def _spawn(self, name: str, argv: Sequence[str]) -> LoggedProcess:
        process = LoggedProcess(name, argv, self.logs_dir / f"{name}.log").start()
        self.processes.append(process)
        return process

    def _start_etcd(self) -> str:
        client, peer = free_port(), free_port()
        url = f"http://127.0.0.1:{client}"
        etcd = self._spawn("etcd", [
            str(self.binaries.etcd), "--name", "e2e",
            "--data-dir", str(self.workdir / "etcd"),
            "--listen-client-urls", url, "--advertise-client-urls", url,
            "--listen-peer-urls", f"http://127.0.0.1:{peer}",
            "--initial-advertise-peer-urls", f"http://127.0.0.1:{peer}",
            "--initial-cluster", f"e2e=http://127.0.0.1:{peer}",
            "--unsafe-no-fsync", "--log-level", "warn",
        ])
        etcd.wait_until(lambda: urllib.request.urlopen(f"{url}/health", timeout=2).status == 200,
                        timeout_s=30, what="etcd /health")
        return url

    def _start_apiserver(self, etcd_url: str, serving: pki.KeyPair,
                         service_account: pki.KeyPair) -> None:
        policy = self.workdir / "audit-policy.yaml"
        policy.write_text(AUDIT_POLICY)
        apiserver = self._spawn("kube-apiserver", [
            str(self.binaries.apiserver),
            f"--etcd-servers={etcd_url}",
            "--bind-address=127.0.0.1", "--advertise-address=127.0.0.1",
            f"--secure-port={self.port}",
            f"--cert-dir={self.pki_dir}",
            f"--tls-cert-file={serving.cert}", f"--tls-private-key-file={serving.key}",
            f"--client-ca-file={self.ca.pair.cert}",
            f"--service-cluster-ip-range={SERVICE_CLUSTER_IP_RANGE}",
            f"--service-account-issuer={SERVICE_ACCOUNT_ISSUER}",
            f"--service-account-key-file={service_account.cert}",
            f"--service-account-signing-key-file={service_account.key}",
            "--authorization-mode=Node,RBAC",
            "--enable-admission-plugins=OwnerReferencesPermissionEnforcement",
            "--allow-privileged=true",
            f"--audit-policy-file={policy}",
            f"--audit-log-path={self.audit.path}", "--audit-log-format=json",
            "--profiling=false",
            *self.apiserver_args,
        ])
        context = ssl.create_default_context(cafile=str(self.ca.pair.cert))

        def ready() -> bool:
            with urllib.request.urlopen(f"{self.server}/readyz", timeout=2,
                                        context=context) as response:
                return bool(response.status == 200)

        apiserver.wait_until(ready, timeout_s=60, what="/readyz", interval_s=0.2)

    def _install_crds(self) -> None:
        """``kubectl apply -f`` each CRD file or directory, before the controller manager starts.

        Its garbage collector learns the API's resources at start and then every 30 s; an
        object owned by a custom resource it does not know yet fails ("unable to get REST
        mapping") and is retried with a growing back-off, so children of a JobQueue deleted in
        the first minute would outlive it for minutes. In a real cluster the CRD is long there.
        """
        for path in self.crds:
            result = subprocess.run([str(self.binaries.kubectl), "--kubeconfig",
                                     str(self.admin_kubeconfig), "apply", "-f", str(path)],
                                    capture_output=True, text=True, timeout=60, check=False)
            if result.returncode != 0:
                raise RuntimeError(f"kubectl apply -f {path}: {result.stderr.strip()}")

    def _start_controller_manager(self, client: pki.KeyPair,
                                  service_account: pki.KeyPair) -> None:
        kubeconfig = kubeconfigs.write(
            self.workdir / "controller-manager.kubeconfig", server=self.server,
            ca=self.ca.pair.cert, user=kubeconfigs.client_cert_user(client.cert, client.key))
        manager = self._spawn("kube-controller-manager", [
            str(self.binaries.controller_manager),
            f"--kubeconfig={kubeconfig}",
            f"--authentication-kubeconfig={kubeconfig}",
            f"--authorization-kubeconfig={kubeconfig}",
            "--bind-address=127.0.0.1", f"--secure-port={free_port()}",
            f"--cert-dir={self.pki_dir / 'controller-manager'}",
            f"--service-account-private-key-file={service_account.key}",
            f"--root-ca-file={self.ca.pair.cert}",
            "--use-service-account-credentials",
            f"--controllers={','.join(self.controllers)}",
            "--leader-elect=false",
            "--profiling=false",
        ])
        # The ServiceAccount controller makes "default" in every namespace: the manager is up,
        # authenticated and authorised.
        manager.wait_until(lambda: self._get("/api/v1/namespaces/default/serviceaccounts/default"),
                           timeout_s=60, what="the default ServiceAccount", interval_s=0.2)

    def _get(self, path: str) -> bool:
        result = subprocess.run([str(self.binaries.kubectl), "--kubeconfig",
                                 str(self.admin_kubeconfig), "get", "--raw", path],
                                capture_output=True, text=True, timeout=10, check=False)
        return result.returncode == 0 and bool(json.loads(result.stdout))

    def start(self) -> ControlPlane:
        started = time.monotonic()
        self.workdir.mkdir(parents=True, exist_ok=True)
        serving, controller_manager, service_account = self._make_pki()
        try:
            etcd_url = self._start_etcd()
            self._start_apiserver(etcd_url, serving, service_account)
            self._install_crds()
            self._start_controller_manager(controller_manager, service_account)
        except BaseException:
            self.stop()
            raise
        self.started_in_s = time.monotonic() - started
        return self

    def stop(self) -> None:
        """Stop every component by pid, the last started first (again: a no-op)."""
        for process in reversed(self.processes):
            process.stop(timeout_s=15)

    def environment(self) -> dict[str, str]:
        """Environment for kubectl, helm and the operator: the admin kubeconfig, nothing else."""
        env = {k: v for k, v in os.environ.items() if not k.startswith("KUBERNETES_SERVICE")}
        env["KUBECONFIG"] = str(self.admin_kubeconfig)
        return env
