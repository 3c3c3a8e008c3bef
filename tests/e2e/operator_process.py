"""The operator as a local process (``python -m antre_operator``) with a kubeconfig of its own.

Given the kubeconfig of the chart's ServiceAccount, the process has exactly the rights the chart
grants, so any 403 in its log is an RBAC rule the chart lacks: :meth:`OperatorProcess.forbidden`
lists those lines and the tests fail on them.
"""

from __future__ import annotations

import copy
import re
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path

from redis_servers import child_env, free_port

from .processes import LoggedProcess

#: Log lines that mean the API server refused the operator something. kopf says "Not enough
#: permissions" when a watch or a patch is refused; our client logs "HTTP 403".
FORBIDDEN = re.compile(r"HTTP 403|\b403\b.*[Ff]orbidden|[Ff]orbidden:|Not enough permissions"
                       r"|APIForbiddenError")


def chart_args(deployment: Mapping[str, object]) -> list[str]:
    """The operator's arguments from the chart's Deployment, with local ports instead of the
    pod's (liveness and metrics would collide between processes on one machine)."""
    containers = deployment["spec"]["template"]["spec"]["containers"]  # type: ignore[index]
    return [_local_port(arg) for arg in containers[0].get("args") or []]


def _local_port(arg: str) -> str:
    """``arg`` with a free local port if it names the liveness or metrics port."""
    if arg.startswith("--liveness="):
        return f"--liveness=http://127.0.0.1:{free_port()}/healthz"
    if arg.startswith("--metrics-port="):
        return f"--metrics-port={free_port()}"
    return arg


class OperatorProcess(LoggedProcess):
    """``antre-operator ARGS`` with ``KUBECONFIG`` set; polls Redis every ``polling_s``."""

    def __init__(self, kubeconfig: Path, log_path: Path, args: Sequence[str], *,
                 polling_s: float | None = 1.0, extra_env: Mapping[str, str] | None = None,
                 ) -> None:
        env = {k: v for k, v in child_env().items() if not k.startswith("KUBERNETES_SERVICE")}
        env["KUBECONFIG"] = str(kubeconfig)
        if polling_s is not None:
            env["ANTRE_OPERATOR_POLLING_INTERVAL"] = f"{polling_s:g}"
        env.update(extra_env or {})
        super().__init__("antre-operator", [sys.executable, "-m", "antre_operator", *args],
                         log_path, env=env)

    def twin(self, log_path: Path) -> OperatorProcess:
        """A process like this one (credentials, arguments, environment), not started: the
        operator a test starts after killing this one."""
        twin = copy.copy(self)
        twin.log_path, twin.process = log_path, None
        return twin

    def replica(self, log_path: Path) -> OperatorProcess:
        """Another replica beside this one (credentials, arguments, environment), not started:
        its own liveness and metrics ports, as another pod would have."""
        replica = self.twin(log_path)
        replica.argv = [_local_port(arg) for arg in self.argv]
        return replica

    def forbidden(self) -> list[str]:
        return [line for line in self.log().splitlines() if FORBIDDEN.search(line)]

    def errors(self) -> list[str]:
        """Tracebacks and ERROR lines: an operator that works logs none."""
        return [line for line in self.log().splitlines()
                if "Traceback" in line or re.search(r"\bERROR\b|\[ERROR", line)]
