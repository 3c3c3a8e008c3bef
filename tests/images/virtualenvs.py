"""Fresh virtualenvs filled by this interpreter's pip, for the install tests (test_install.py,
test_dependency_floors.py): packages come from PyPI only, and nothing of the test run (its
PYTHONPATH, a local wheel directory) stands in for what a user's install would hold."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

TIMEOUT_S = 600


def pip_env() -> dict[str, str]:
    """This machine's pip settings, minus a local wheel directory that could stand in for
    PyPI's files; no PYTHONPATH, so the source tree cannot shadow an installed package."""
    env = {k: v for k, v in os.environ.items() if k not in {"PYTHONPATH", "PYTHONHOME"}}
    env["PIP_FIND_LINKS"] = ""
    env["PIP_DISABLE_PIP_VERSION_CHECK"] = "1"
    return env


def run(*args: str | Path, env: dict[str, str] | None = None, cwd: Path | None = None) -> str:
    result = subprocess.run([str(a) for a in args], capture_output=True, text=True,
                            timeout=TIMEOUT_S, check=False, env=env or pip_env(), cwd=cwd)
    assert result.returncode == 0, (f"{' '.join(map(str, args))} failed:\n"
                                    f"{result.stdout}\n{result.stderr}")
    return result.stdout


def pip(*args: str | Path, env: dict[str, str] | None = None) -> str:
    return run(sys.executable, "-m", "pip", *args, env=env)


def new_venv(root: Path) -> Path:
    """A virtualenv without pip of its own (this interpreter's pip fills it: ``--python``)."""
    run(sys.executable, "-m", "venv", "--without-pip", root)
    return root / "bin" / "python"
