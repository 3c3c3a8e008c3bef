"""Fresh virtualenvs filled by this interpreter's pip, for the install tests (test_install.py,
test_dependency_floors.py, test_distribution.py): packages come from PyPI only, and nothing of
the test run (its PYTHONPATH, a local wheel directory) stands in for what a user's install would
hold; the commands a virtualenv installed run as a user's shell would run them."""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

from redis_servers import free_port

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


def user_env() -> dict[str, str]:
    """A user's shell: no PYTHONPATH from the test run (the source tree must not stand in for
    the install), no virtualenv of the run's, no ANTRE_* (no Redis URL)."""
    return {k: v for k, v in pip_env().items()
            if k != "VIRTUAL_ENV" and not k.startswith("ANTRE_")}


@contextlib.contextmanager
def serving_api(venv: Path, redis_url: str, queue: str, cwd: Path) -> Iterator[
        tuple[str, subprocess.Popen[str]]]:
    """``antre api --no-auth --dashboard`` from ``venv`` for ``queue``: its base URL and its
    process (stderr piped, read by the caller after the block); stopped after the block."""
    port = free_port()
    process = subprocess.Popen(
        [venv / "bin" / "antre", "api", "--no-auth", "--dashboard", "--port", str(port),
         "--redis-url", redis_url, "--queue", queue], cwd=cwd, env=user_env(),
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        yield f"http://127.0.0.1:{port}", process
    finally:
        process.terminate()
