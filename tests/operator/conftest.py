"""Fixtures of the operator tests: the CRD and its schema, what Redis replies cost.

Sample JobQueues live in ``operator_samples.py``; the kopf + kmock integration helpers in
``operator_emulation.py`` (module names prefixed so they never collide with other test dirs).
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from antre_operator import reply_cap
from antre_operator.settings import OperatorSettings
from operator_samples import CRD_PATH
from redis_servers import free_port


def pytest_configure(config: pytest.Config) -> None:
    # hypothesis' failure report touches mypy_extensions.TypedDict, deprecated in this
    # environment; with warnings as errors that would hide the real falsifying example.
    config.addinivalue_line(
        "filterwarnings", "ignore:mypy_extensions.TypedDict is deprecated:DeprecationWarning")


@pytest.fixture
def reply_costs(monkeypatch: pytest.MonkeyPatch) -> dict[reply_cap.Read, int]:
    """What the replies read from here on cost, per ``reply_cap.Read`` (each read's total)."""
    costs: dict[reply_cap.Read, int] = {}
    charge = reply_cap.charge

    def counted(read: reply_cap.Read, more: int) -> str | None:
        costs[read] = costs.get(read, 0) + more
        return charge(read, more)

    monkeypatch.setattr(reply_cap, "charge", counted)
    return costs


@pytest.fixture(scope="session")
def crd() -> dict[str, Any]:
    with CRD_PATH.open() as f:
        return dict(yaml.safe_load(f))


@pytest.fixture(scope="session")
def crd_schema(crd: dict[str, Any]) -> dict[str, Any]:
    return dict(crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"])


# -- integration: the emulator, the kubeconfig pointing at it, the operator in a thread -----------

@pytest.fixture
async def k8s() -> AsyncIterator[Any]:
    from kmock import Server
    from operator_emulation import Emulator, declare_resources

    async with Emulator() as emulator, Server(emulator):
        declare_resources(emulator)
        yield emulator


@pytest.fixture
def kubeconfig(k8s: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    import kubernetes
    from operator_emulation import write_kubeconfig
    path = write_kubeconfig(tmp_path / "kubeconfig", str(k8s.url).rstrip("/"))
    monkeypatch.setenv("KUBECONFIG", str(path))
    # The kubernetes package reads KUBECONFIG when imported; kopf's login_via_client then uses it.
    monkeypatch.setattr(kubernetes.config.kube_config, "KUBE_CONFIG_DEFAULT_LOCATION", str(path))
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    return path


@pytest.fixture
def operator_settings() -> OperatorSettings:
    # Cluster-wide: kmock cannot parse the cluster-scoped `/api/v1/namespaces` URL that kopf
    # lists to follow namespace patterns.
    return OperatorSettings(namespaces=(), metrics_port=free_port(),
                            redis_timeout_s=1.0)


@pytest.fixture
async def operator(kubeconfig: Path, operator_settings: OperatorSettings,
                   ) -> AsyncIterator[Any]:
    from operator_emulation import OperatorThread

    thread = OperatorThread(operator_settings)
    await thread.start()
    try:
        yield thread
    finally:
        await thread.stop()
