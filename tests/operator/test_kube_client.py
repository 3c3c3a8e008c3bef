"""The Kubernetes client's failure modes: every failure to get an answer is a KubeError.

Aspects: a refused connection and a request that times out raise ``kube.KubeError`` (not
aiohttp's or asyncio's exceptions), so ``Reconciler.step`` turns them into a condition and
``_prefer_idle_pods`` holds a scale-down instead of the step crashing.
"""

from __future__ import annotations

import asyncio

import kubernetes
import pytest
from antre_operator import kube
from redis_servers import free_port


def client(host: str, timeout_s: float) -> kube.KubeClient:
    configuration = kubernetes.client.Configuration()
    configuration.host = host
    return kube.KubeClient(timeout_s=timeout_s, configuration=configuration)


async def test_refused_connection_is_a_kube_error() -> None:
    api = client(f"http://127.0.0.1:{free_port()}", 2)
    try:
        with pytest.raises(kube.KubeError, match="no answer from the API server"):
            await api.get("Deployment", "default", "x")
    finally:
        await api.close()


async def test_timeout_is_a_kube_error() -> None:
    async def silent(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await asyncio.sleep(5)
        writer.close()

    server = await asyncio.start_server(silent, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    api = client(f"http://127.0.0.1:{port}", 0.2)
    try:
        with pytest.raises(kube.KubeError) as info:
            await api.list("Pod", "default", labels={"a": "b"})
        assert info.value.status == 0
    finally:
        await api.close()
        server.close()
