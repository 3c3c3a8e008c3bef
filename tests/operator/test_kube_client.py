"""The Kubernetes client: failure modes, and what a create and a later patch write.

Aspects: a refused connection and a request that times out raise ``kube.KubeError`` (not
aiohttp's or asyncio's exceptions), so ``Reconciler.step`` turns them into a condition and
``_prefer_idle_pods`` holds a scale-down instead of the step crashing. A child created and then
patched with the same manifest ends up exactly as created: the API server keeps empty objects it
is given, so a create that sent ``affinity: {}`` followed by a patch that removes it changed
every pod template once (a rollout of all workers at the first scale; seen on a real server).
Error answers map to the exception callers tell apart (409 Conflict, 403 in a namespace being
deleted, anything else).
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

import kubernetes
import pytest
from antre_operator import kube, rendering
from operator_fakes import merge_patch
from operator_samples import FULL, MINIMAL, OWNER_UID, parse
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


@pytest.mark.parametrize("body", [pytest.param(MINIMAL, id="minimal"),
                                  pytest.param(FULL, id="full")])
def test_a_patch_after_the_create_changes_nothing(body: dict[str, Any]) -> None:
    for manifest in rendering.render_children(parse(body), OWNER_UID, replicas=2).present:
        created = kube.create_body(manifest)
        assert merge_patch(created, kube.patch_body(manifest)) == created, manifest["kind"]


NAMESPACE_TERMINATING = (
    '{"kind":"Status","status":"Failure","message":"deployments.apps \\"q-worker\\" is '
    'forbidden: unable to create new content in namespace team because it is being '
    'terminated","reason":"Forbidden","details":{"name":"q-worker","kind":"deployments",'
    '"causes":[{"reason":"NamespaceTerminating","message":"namespace team is being '
    'terminated","field":"metadata.namespace"}]},"code":403}')


@pytest.mark.parametrize("status, text, expected, message", [
    pytest.param(403, NAMESPACE_TERMINATING, kube.NamespaceTerminating, "is being terminated",
                 id="namespace-deleted"),
    pytest.param(403, '{"message": "forbidden: User cannot create"}', kube.KubeError,
                 "User cannot create", id="rbac-refusal"),
    pytest.param(409, '{"message": "already exists"}', kube.Conflict, "already exists",
                 id="conflict"),
    pytest.param(500, "<html>proxy error</html>", kube.KubeError, "Reason", id="not-json"),
])
def test_error_answers_map_to_exceptions(status: int, text: str,
                                         expected: type[kube.KubeError], message: str) -> None:
    error = kube.error_for(status, "Reason", text)
    assert type(error) is expected
    assert error.status == status
    assert message in str(error)


@pytest.mark.parametrize("name", [
    "../../kube-system/secrets/admin-creds",
    "..%2F..%2Fkube-system%2Fsecrets%2Fadmin-creds",
    "a/b",
])
async def test_a_name_is_one_escaped_path_segment(name: str) -> None:
    """Dot segments are never collapsed into another namespace's path: the request names one
    object in the namespace asked for, whatever the name holds."""
    seen: list[str] = []

    async def record(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        seen.append((await reader.readline()).decode().split(" ")[1])
        writer.write(b"HTTP/1.1 404 Not Found\r\nContent-Length: 2\r\nConnection: close\r\n\r\n{}")
        await writer.drain()
        writer.close()

    server = await asyncio.start_server(record, "127.0.0.1", 0)
    api = client(f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}", 2)
    try:
        assert await api.get("Secret", "team-a", name) is None
    finally:
        await api.close()
        server.close()
    [path] = seen
    prefix = "/api/v1/namespaces/team-a/secrets/"
    assert path.startswith(prefix) and "/" not in path[len(prefix):], path
    assert "kube-system/" not in path


@pytest.mark.parametrize("name", [".", "..", ""])
def test_dot_segments_are_no_names(name: str) -> None:
    with pytest.raises(ValueError):
        kube.path_of("Secret", "team-a", name)


@pytest.mark.parametrize("answer", [
    pytest.param({"kind": "Secret", "metadata": {"name": "admin-creds",
                                                 "namespace": "kube-system"}}, id="namespace"),
    pytest.param({"kind": "Secret", "metadata": {"name": "other", "namespace": "team-a"}},
                 id="name"),
    pytest.param({"kind": "ConfigMap", "metadata": {"name": "redis", "namespace": "team-a"}},
                 id="kind"),
    pytest.param({"kind": "Secret"}, id="no-metadata"),
])
async def test_an_answer_for_another_object_is_refused(answer: dict[str, Any]) -> None:
    body = json.dumps(answer).encode()

    async def reply(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.readline()
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: "
                     + str(len(body)).encode() + b"\r\nConnection: close\r\n\r\n" + body)
        await writer.drain()
        writer.close()

    server = await asyncio.start_server(reply, "127.0.0.1", 0)
    api = client(f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}", 2)
    try:
        with pytest.raises(kube.NotAskedFor, match="asked for Secret team-a/redis"):
            await api.get("Secret", "team-a", "redis")
    finally:
        await api.close()
        server.close()
