"""scripts/fetch_kube.sh: the binaries of the control plane, at the pinned versions, cached.

Aspects: stdout is exactly the NAME=PATH lines (so callers can parse or eval it), each an
executable that reports the version pinned in scripts/kube/*/go.mod (kubectl: the 1.35 of the
PyPI layer); a second run is quick (nothing rebuilt); ``--kubectl-only`` builds nothing.
Not under tests/e2e: the end-to-end tests run against a cluster of your own without building.
"""

from __future__ import annotations

import os
import re
import subprocess
import time
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]
FETCH_SCRIPT = REPO_ROOT / "scripts" / "fetch_kube.sh"


def fetch(*args: str) -> dict[str, str]:
    result = subprocess.run(["bash", str(FETCH_SCRIPT), *args], capture_output=True, text=True,
                            timeout=3600, check=False)
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert all(re.fullmatch(r"[A-Z_]+=/\S+", line) for line in lines), lines
    return dict(line.split("=", 1) for line in lines)


def pinned(module_dir: str, module: str) -> str:
    text = (REPO_ROOT / "scripts" / "kube" / module_dir / "go.mod").read_text()
    match = re.search(rf"^\s*(?:require\s+)?{re.escape(module)} (v\S+)", text, re.MULTILINE)
    assert match, module
    return match.group(1)


def version_of(*argv: str) -> str:
    return subprocess.run(list(argv), capture_output=True, text=True, timeout=60,
                          check=True).stdout


def test_binaries_report_the_pinned_versions() -> None:
    paths = fetch()
    assert set(paths) == {"KUBE_APISERVER", "KUBE_CONTROLLER_MANAGER", "ETCD", "KUBECTL"}
    for path in paths.values():
        assert os.access(path, os.X_OK), path
    kubernetes = pinned("kubernetes", "k8s.io/kubernetes")
    etcd = pinned("etcd", "go.etcd.io/etcd/server/v3")
    assert version_of(paths["KUBE_APISERVER"], "--version").strip() == f"Kubernetes {kubernetes}"
    assert version_of(paths["KUBE_CONTROLLER_MANAGER"], "--version").strip() == (
        f"Kubernetes {kubernetes}")
    assert f"etcd Version: {etcd.removeprefix('v')}" in version_of(paths["ETCD"], "--version")
    client = version_of(paths["KUBECTL"], "version", "--client")
    minor = kubernetes.rsplit(".", 1)[0]
    assert f"Client Version: {minor}." in client, "kubectl within one minor of the server"


def test_second_run_is_quick_and_kubectl_only_builds_nothing() -> None:
    first = fetch()
    started = time.monotonic()
    assert fetch() == first
    assert fetch("--kubectl-only") == {"KUBECTL": first["KUBECTL"]}
    assert time.monotonic() - started < 5, "cached binaries must not be rebuilt"
