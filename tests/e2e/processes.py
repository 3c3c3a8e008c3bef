"""Long-running processes of the e2e tests: each with a log file, stopped by its own pid.

Used for the control plane's components and for the operator run as a local process. A process
that dies, or a wait that runs out, fails with the tail of its log, so a broken start says why.
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import subprocess
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path


class ProcessFailed(AssertionError):
    """A process exited or never became ready; the message ends with the tail of its log."""


class LoggedProcess:
    """One child process whose stdout and stderr go to ``log_path``."""

    def __init__(self, name: str, argv: Sequence[str], log_path: Path, *,
                 env: Mapping[str, str] | None = None, cwd: Path | None = None) -> None:
        self.name = name
        self.argv = list(argv)
        self.log_path = log_path
        self.env = dict(env) if env is not None else None
        self.cwd = cwd
        self.process: subprocess.Popen[bytes] | None = None

    def start(self) -> LoggedProcess:
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        with self.log_path.open("ab") as log:
            # A session of its own: a Ctrl-C in the terminal reaches pytest only, which then
            # stops every process here by pid.
            self.process = subprocess.Popen(self.argv, stdout=log, stderr=subprocess.STDOUT,
                                            stdin=subprocess.DEVNULL, env=self.env, cwd=self.cwd,
                                            start_new_session=True)
        return self

    @property
    def pid(self) -> int:
        assert self.process is not None, f"{self.name} was not started"
        return self.process.pid

    def alive(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def log(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")
        except FileNotFoundError:
            return ""

    def tail(self, lines: int = 40) -> str:
        return "\n".join(self.log().splitlines()[-lines:])

    def failure(self, what: str) -> ProcessFailed:
        state = ("running" if self.alive() else
                 f"exited with {self.process.returncode}" if self.process else "not started")
        return ProcessFailed(f"{self.name} ({state}): {what}\n--- last lines of {self.log_path}:\n"
                             f"{self.tail()}")

    def wait_until(self, predicate: Callable[[], object], *, timeout_s: float, what: str,
                   interval_s: float = 0.1) -> None:
        """Poll ``predicate`` until truthy; fail early if the process dies, or at the deadline."""
        deadline = time.monotonic() + timeout_s
        last_error: Exception | None = None
        while time.monotonic() < deadline:
            if not self.alive():
                raise self.failure(f"died while waiting for {what}")
            try:
                if predicate():
                    return
            except Exception as exc:  # not answering yet
                last_error = exc
            time.sleep(interval_s)
        detail = f" (last error: {last_error!r})" if last_error else ""
        raise self.failure(f"timed out after {timeout_s:g} s waiting for {what}{detail}")

    def wait_for_log(self, pattern: str, *, timeout_s: float = 30.0) -> re.Match[str]:
        """The first match of the regular expression ``pattern`` in the log."""
        found: list[re.Match[str]] = []

        def matched() -> bool:
            match = re.search(pattern, self.log())
            if match:
                found.append(match)
            return match is not None

        self.wait_until(matched, timeout_s=timeout_s, what=f"{pattern!r} in the log")
        return found[0]

    def stop(self, *, timeout_s: float = 10.0, sig: int = signal.SIGTERM) -> int | None:
        """Signal the process (by pid), wait, SIGKILL it if it lingers; returns its exit code."""
        if self.process is None:
            return None
        if self.process.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.process.pid, sig)
            try:
                self.process.wait(timeout=timeout_s)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(self.process.pid, signal.SIGKILL)
                self.process.wait(timeout=10)
        return self.process.returncode
