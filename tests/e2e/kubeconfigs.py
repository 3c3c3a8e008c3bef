"""Writing kubeconfig files: one cluster, one user (client certificate, token or impersonation)."""

from __future__ import annotations

import base64
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import yaml


def client_cert_user(cert: Path, key: Path) -> dict[str, Any]:
    return {"client-certificate": str(cert), "client-key": str(key)}


def token_user(token: str) -> dict[str, Any]:
    return {"token": token}


def impersonating_user(admin: Mapping[str, Any], user: str,
                       groups: Sequence[str] = ()) -> dict[str, Any]:
    """The admin's credentials acting as ``user`` (what ``kubectl --as`` does)."""
    entry = dict(admin)
    entry["as"] = user
    if groups:
        entry["as-groups"] = list(groups)
    return entry


def write(path: Path, *, server: str, user: Mapping[str, Any], ca: Path | None = None,
          ca_data: str | None = None, namespace: str | None = None,
          name: str = "antre-e2e") -> Path:
    """A kubeconfig with a single context; ``ca`` is a file, ``ca_data`` base64 PEM."""
    cluster: dict[str, Any] = {"server": server}
    if ca is not None:
        cluster["certificate-authority-data"] = base64.b64encode(ca.read_bytes()).decode()
    elif ca_data is not None:
        cluster["certificate-authority-data"] = ca_data
    context: dict[str, Any] = {"cluster": name, "user": name}
    if namespace is not None:
        context["namespace"] = namespace
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": name, "cluster": cluster}],
        "users": [{"name": name, "user": dict(user)}],
        "contexts": [{"name": name, "context": context}],
        "current-context": name,
    }
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    path.chmod(0o600)
    return path
