"""scripts/fetch_helm.sh: prints the path of a working helm, and is quick once cached.

Aspects: stdout is exactly one executable path (so `HELM="$(bash scripts/fetch_helm.sh)"` works);
that helm answers `version`; $HELM wins over everything else; a second run does no download.
"""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path

from .helm_runner import REPO_ROOT

SCRIPT = REPO_ROOT / "scripts" / "fetch_helm.sh"


def fetch(env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["bash", str(SCRIPT)], capture_output=True, text=True, timeout=300,
                          check=False, env=env, cwd=REPO_ROOT)


def test_prints_one_working_helm(helm: str) -> None:
    first = fetch()
    assert first.returncode == 0, first.stderr
    started = time.monotonic()
    second = fetch()
    assert time.monotonic() - started < 5, "the second run must find the cached binary"
    assert first.stdout == second.stdout
    (path,) = second.stdout.splitlines()
    assert os.access(path, os.X_OK)
    version = subprocess.run([path, "version", "--short"], capture_output=True, text=True,
                             timeout=30, check=True)
    assert version.stdout.startswith(("v3.", "v4."))


def test_helm_env_wins(tmp_path: Path) -> None:
    fake = tmp_path / "my-helm"
    fake.write_text("#!/bin/sh\n")
    fake.chmod(0o755)
    result = fetch(env={**os.environ, "HELM": str(fake)})
    assert result.stdout.strip() == str(fake)
