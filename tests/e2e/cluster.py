"""What the journeys need from a cluster, whether the suite built it or the user brought it.

:class:`Cluster` runs the real ``kubectl`` and ``helm`` with an admin kubeconfig, makes
kubeconfigs for ServiceAccounts (through the TokenRequest API, as a pod's projected token) and
for users, and reads the audit log when there is one (the built control plane has it; a cluster
of your own, given by ``ANTRE_E2E_KUBECONFIG``, usually does not let us read it).
"""

from __future__ import annotations

import functools
import json
import os
import secrets
import subprocess
import urllib.parse
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import kubernetes
import yaml
from antre_operator import kube
from redis_servers import wait_until

from . import kubeconfigs
from .audit import AuditLog
from .control_plane import ControlPlane

REPO_ROOT = Path(__file__).resolve().parents[2]


class CommandFailed(AssertionError):
    pass


class Cluster:
    def __init__(self, *, kubeconfig: Path, kubectl: Path, helm: Path, workdir: Path,
                 control_plane: ControlPlane | None = None) -> None:
        self.kubeconfig = kubeconfig
        self.kubectl_path = kubectl
        self.helm_path = helm
        self.workdir = workdir
        self.control_plane = control_plane
        self.audit: AuditLog | None = control_plane.audit if control_plane else None
        (workdir / "home").mkdir(parents=True, exist_ok=True)

    @property
    def built(self) -> bool:
        """The suite's own control plane (not a cluster given by ANTRE_E2E_KUBECONFIG)."""
        return self.control_plane is not None

    # -- running the tools ------------------------------------------------------------------------

    def env(self, kubeconfig: Path | None = None) -> dict[str, str]:
        """kubectl's and helm's environment: this cluster only, caches inside the workdir."""
        home = self.workdir / "home"
        env = {k: v for k, v in os.environ.items()
               if not k.startswith(("KUBERNETES_SERVICE", "HELM_"))}
        env.update(KUBECONFIG=str(kubeconfig or self.kubeconfig), HOME=str(home),
                   HELM_CACHE_HOME=str(home / "helm-cache"),
                   HELM_CONFIG_HOME=str(home / "helm-config"),
                   HELM_DATA_HOME=str(home / "helm-data"))
        return env

    def run(self, argv: Sequence[str], *, kubeconfig: Path | None = None,
            input: str | None = None, check: bool = True,
            timeout_s: float = 120) -> subprocess.CompletedProcess[str]:
        result = subprocess.run(list(argv), capture_output=True, text=True, input=input,
                                env=self.env(kubeconfig), cwd=REPO_ROOT, timeout=timeout_s,
                                check=False)
        if check and result.returncode != 0:
            raise CommandFailed(f"{' '.join(map(str, argv))} -> exit {result.returncode}\n"
                                f"{result.stderr.strip()}\n{result.stdout.strip()}")
        return result

    def kubectl(self, *args: str, **kwargs: Any) -> subprocess.CompletedProcess[str]:
        return self.run([str(self.kubectl_path), *args], **kwargs)

    def helm(self, *args: str, **kwargs: Any) -> subprocess.CompletedProcess[str]:
        return self.run([str(self.helm_path), *args], **kwargs)

    @functools.cached_property
    def _api(self) -> tuple[kubernetes.client.Configuration, kubernetes.client.ApiClient]:
        config = kubernetes.client.Configuration()
        kubernetes.config.load_kube_config(  # type: ignore[no-untyped-call]
            config_file=str(self.kubeconfig), client_configuration=config)
        return config, kubernetes.client.ApiClient(config)

    def request(self, method: str, path: str, body: Any = None, *,
                query: Mapping[str, str] | None = None) -> tuple[int, dict[str, Any]]:
        """One API request as the admin, straight over HTTP (no kubectl start-up): for tables
        of cases where the answer matters, not the tool. Returns (status, JSON body)."""
        config, client = self._api
        url = config.host + path + ("?" + urllib.parse.urlencode(query) if query else "")
        headers = {"Accept": "application/json", "Content-Type": "application/json"}
        token = kube.bearer_token(config)
        if token:
            headers["Authorization"] = f"Bearer {token}"
        response = client.call_api(method, url, headers, body)
        response.read()  # type: ignore[no-untyped-call]
        return response.status, json.loads(response.data or b"{}")

    def apply(self, manifests: Mapping[str, Any] | Iterable[Mapping[str, Any]] | str, *,
              namespace: str | None = None, kubeconfig: Path | None = None,
              check: bool = True) -> subprocess.CompletedProcess[str]:
        """``kubectl apply -f -`` of one manifest, several, or YAML text."""
        if isinstance(manifests, str):
            text = manifests
        elif isinstance(manifests, Mapping):
            text = yaml.safe_dump(dict(manifests))
        else:
            text = yaml.safe_dump_all([dict(m) for m in manifests])
        args = ["apply", "-f", "-"] + (["-n", namespace] if namespace else [])
        return self.kubectl(*args, input=text, kubeconfig=kubeconfig, check=check)

    def get(self, resource: str, name: str, namespace: str | None = None, *,
            subresource: str | None = None) -> dict[str, Any] | None:
        """The object as JSON, or None when it does not exist."""
        args = ["get", resource, name, "-o", "json", "--ignore-not-found"]
        if namespace:
            args += ["-n", namespace]
        if subresource:
            args += ["--subresource", subresource]
        out = self.kubectl(*args).stdout
        return json.loads(out) if out.strip() else None

    def items(self, resource: str, namespace: str | None = None,
              selector: str | None = None) -> list[dict[str, Any]]:
        args = ["get", resource, "-o", "json"]
        args += ["-n", namespace] if namespace else ["--all-namespaces"]
        if selector:
            args += ["-l", selector]
        return list(json.loads(self.kubectl(*args).stdout)["items"])

    def wait_for(self, resource: str, name: str, namespace: str | None, *,
                 until: Any = bool, timeout_s: float = 30, what: str | None = None,
                 ) -> dict[str, Any]:
        """Poll the object until ``until(obj)`` is truthy; returns the object."""
        found: list[dict[str, Any]] = []

        def check() -> bool:
            obj = self.get(resource, name, namespace)
            if obj is not None and until(obj):
                found.append(obj)
                return True
            return False

        wait_until(check, timeout_s=timeout_s, interval_s=0.3,
                   message=what or f"{resource} {namespace}/{name}")
        return found[-1]

    def wait_gone(self, resource: str, name: str, namespace: str | None, *,
                  timeout_s: float = 30) -> None:
        wait_until(lambda: self.get(resource, name, namespace) is None, timeout_s=timeout_s,
                   interval_s=0.3, message=f"{resource} {namespace}/{name} to be deleted")

    # -- namespaces and credentials ---------------------------------------------------------------

    def create_namespace(self, prefix: str, *, labels: Mapping[str, str] | None = None) -> str:
        """A new namespace with a unique name, enforcing the "restricted" Pod Security Standard
        (so every pod a controller creates from our templates must meet it)."""
        name = f"{prefix}-{secrets.token_hex(3)}"
        self.apply({"apiVersion": "v1", "kind": "Namespace", "metadata": {
            "name": name, "labels": {
                "pod-security.kubernetes.io/enforce": "restricted",
                "pod-security.kubernetes.io/warn": "restricted",
                **(labels or {})}}})
        return name

    def grant(self, namespace: str, *, group: str, role: str,
              rules: Sequence[Mapping[str, Any]]) -> None:
        """A Role ``role`` with ``rules`` in ``namespace``, bound to the user group ``group``."""
        self.apply([
            {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
             "metadata": {"name": role}, "rules": [dict(r) for r in rules]},
            {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
             "metadata": {"name": f"{group}-{role}"},
             "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": role},
             "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "Group",
                           "name": group}]}], namespace=namespace)

    def delete_namespace(self, name: str) -> None:
        self.kubectl("delete", "namespace", name, "--wait=false", "--ignore-not-found")

    def _cluster_entry(self) -> tuple[str, str | None]:
        """Server URL and CA (base64) of the admin kubeconfig's current context."""
        view = json.loads(self.kubectl("config", "view", "--raw", "--minify", "--flatten",
                                       "-o", "json").stdout)
        cluster = view["clusters"][0]["cluster"]
        return cluster["server"], cluster.get("certificate-authority-data")

    def _admin_user(self) -> dict[str, Any]:
        view = json.loads(self.kubectl("config", "view", "--raw", "--minify", "--flatten",
                                       "-o", "json").stdout)
        return dict(view["users"][0]["user"])

    def service_account_kubeconfig(self, namespace: str, name: str, *,
                                   duration: str = "2h") -> Path:
        """A kubeconfig with a token of ServiceAccount ``namespace/name`` from the TokenRequest
        API: exactly the credential a pod running as that account gets."""
        token = self.kubectl("create", "token", name, "-n", namespace,
                             f"--duration={duration}").stdout.strip()
        server, ca_data = self._cluster_entry()
        path = self.workdir / "kubeconfigs" / f"sa-{namespace}-{name}.kubeconfig"
        return kubeconfigs.write(path, server=server, ca_data=ca_data,
                                 user=kubeconfigs.token_user(token))

    def user_kubeconfig(self, user: str, groups: Sequence[str] = (), *,
                        namespace: str | None = None) -> Path:
        """A kubeconfig acting as ``user`` in ``groups``, with no rights but what RBAC grants:
        a client certificate on the built control plane, impersonation on your own cluster."""
        if self.control_plane is not None:
            return self.control_plane.user_kubeconfig(user, groups, namespace=namespace)
        server, ca_data = self._cluster_entry()
        stem = "".join(c if c.isalnum() else "-" for c in user)
        return kubeconfigs.write(self.workdir / "kubeconfigs" / f"user-{stem}.kubeconfig",
                                 server=server, ca_data=ca_data, namespace=namespace,
                                 user=kubeconfigs.impersonating_user(self._admin_user(), user,
                                                                     groups))
