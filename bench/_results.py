"""Every benchmark keeps what it printed: ``bench/results/<script>-<UTC time>.txt``.

A figure quoted in docs/performance.md should be traceable to the run that printed it, with the
conditions of that run: the file starts with the command line, the commit (and whether the
checkout had changes), the Python and redis-server versions and the load average before the
run, and ends with the load average after it and the exit status. The scripts' own output is
copied as it is printed (the console sees the same lines), so a run that fails half-way still
leaves what it measured. ``BENCH_RESULTS_DIR`` moves the files; an empty value keeps none.
"""

from __future__ import annotations

import datetime
import os
import platform
import shlex
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import IO, NoReturn

REPO = Path(__file__).resolve().parent.parent
DEFAULT_DIR = REPO / "bench" / "results"


class _Tee:
    """Writes go to the console and the results file."""

    def __init__(self, console: IO[str], kept: IO[str]) -> None:
        self.console, self.kept = console, kept

    def write(self, text: str) -> int:
        self.kept.write(text)
        return self.console.write(text)

    def flush(self) -> None:
        self.kept.flush()
        self.console.flush()

    def __getattr__(self, name: str) -> object:
        return getattr(self.console, name)


def _git(*args: str) -> str:
    try:
        return subprocess.run(["git", "-C", str(REPO), *args], capture_output=True, text=True,
                              timeout=10).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return "unknown"


def _redis_version() -> str:
    try:
        out = subprocess.run(["redis-server", "--version"], capture_output=True, text=True,
                             timeout=10).stdout
    except (OSError, subprocess.SubprocessError):
        return "not found"
    return next((part.split("=", 1)[1] for part in out.split() if part.startswith("v=")), out)


def _load() -> str:
    return " ".join(f"{value:.2f}" for value in os.getloadavg())


def header(script: str, argv: list[str]) -> str:
    dirty = " (with uncommitted changes)" if _git("status", "--porcelain", "--untracked-files=no") \
        else ""
    return (f"# {shlex.join(['python', f'bench/{script}', *argv])}\n"
            f"# at {datetime.datetime.now(datetime.UTC):%Y-%m-%d %H:%M:%S} UTC, commit "
            f"{_git('rev-parse', '--short', 'HEAD')}{dirty}\n"
            f"# Python {platform.python_version()}, redis-server {_redis_version()}, "
            f"{os.cpu_count()} CPUs, load average {_load()} (1, 5, 15 min)\n\n")


def run_and_keep(main: Callable[[], int | None], script_file: str) -> NoReturn:
    """Runs a benchmark's ``main`` with its output also written to a results file, then exits
    with its status."""
    script = Path(script_file).name
    directory = os.environ.get("BENCH_RESULTS_DIR", str(DEFAULT_DIR))
    if not directory or "--help" in sys.argv or "-h" in sys.argv:
        raise SystemExit(main())
    stamp = datetime.datetime.now(datetime.UTC).strftime("%Y%m%d-%H%M%S")
    path = Path(directory) / f"{Path(script).stem}-{stamp}.txt"
    path.parent.mkdir(parents=True, exist_ok=True)
    code: int | str | None = 1
    with path.open("w", encoding="utf-8") as kept:
        kept.write(header(script, sys.argv[1:]))
        console = sys.stdout
        sys.stdout = _Tee(console, kept)  # type: ignore[assignment]
        try:
            code = main()
        except SystemExit as exc:
            code = exc.code
        finally:
            sys.stdout = console
            kept.write(f"\n# load average after: {_load()}; exit status {code or 0}\n")
    print(f"results kept in {path.relative_to(REPO) if path.is_relative_to(REPO) else path}")
    raise SystemExit(code)
