"""The e2e control plane's start: a broken one fails loudly and leaves nothing running.

Not under tests/e2e: the end-to-end tests may run against a cluster of your own, without the
built binaries.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from e2e.control_plane import ControlPlane, KubeBinaries
from e2e.processes import ProcessFailed


def test_a_broken_start_fails_with_the_components_log(tmp_path: Path) -> None:
    plane = ControlPlane(KubeBinaries.fetch(), tmp_path, apiserver_args=["--no-such-flag"])
    with pytest.raises(ProcessFailed) as failure:
        plane.start()
    message = str(failure.value)
    assert message.startswith("kube-apiserver (exited with 1): died while waiting for /readyz")
    assert "unknown flag: --no-such-flag" in message, message
    assert [p.name for p in plane.processes] == ["etcd", "kube-apiserver"]
    for process in plane.processes:  # every one stopped (and reaped) by its pid
        assert not process.alive()
        with pytest.raises(ProcessLookupError):
            os.kill(process.pid, 0)
