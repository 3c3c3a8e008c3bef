"""The Kubernetes client: failure modes, error answers, and the ownership upgrade.

Aspects: a refused connection and a request that times out raise ``kube.KubeError`` (not
aiohttp's or asyncio's exceptions), so ``Reconciler.step`` turns them into a condition and
``_prefer_idle_pods`` holds a scale-down instead of the step crashing. Error answers map to the
exception callers tell apart (409 Conflict, 403 in a namespace being deleted, anything else).
A child written by the merge-patching operator of earlier releases has its managed fields turned
into the apply's, so the first apply removes what the spec no longer has; others' stay theirs.
Server-side apply itself is tested on the real API server (tests/e2e).
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

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
        await reader.read()  # no answer: the request is read until the client hangs up
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


def managed(manager: str, operation: str, fields: dict[str, Any],
            subresource: str | None = None) -> dict[str, Any]:
    entry = {"manager": manager, "operation": operation, "apiVersion": "apps/v1",
             "time": "2026-01-01T00:00:00Z", "fieldsType": "FieldsV1", "fieldsV1": fields}
    if subresource is not None:
        entry["subresource"] = subresource
    return entry


def test_merge_patched_fields_become_the_applys() -> None:
    old = managed(kube.FIELD_MANAGER, "Update", {"f:spec": {"f:replicas": {}, "f:template": {
        "f:metadata": {"f:annotations": {"f:team": {}}}}}})
    applied = managed(kube.FIELD_MANAGER, "Apply", {"f:spec": {"f:replicas": {},
                                                               "f:paused": {}}})
    others = [managed("kubectl-edit", "Update", {"f:metadata": {"f:labels": {"f:x": {}}}}),
              managed(kube.FIELD_MANAGER, "Update", {"f:status": {}}, subresource="status"),
              managed("kube-controller-manager", "Update", {"f:status": {}}, "status")]
    live = {"metadata": {"managedFields": [old, *others, applied]}}
    upgraded = kube.upgraded_managed_fields(live)
    assert upgraded is not None
    assert upgraded[:-1] == others
    assert upgraded[-1] == {**applied, "fieldsV1": {"f:spec": {
        "f:replicas": {}, "f:paused": {}, "f:template": {
            "f:metadata": {"f:annotations": {"f:team": {}}}}}}}
    assert kube.upgraded_managed_fields({"metadata": {"managedFields": [*others, applied]}}
                                        ) is None


def test_merge_patched_fields_without_an_apply_yet() -> None:
    old = managed(kube.FIELD_MANAGER, "Update", {"f:spec": {"f:replicas": {}}})
    assert kube.upgraded_managed_fields({"metadata": {"managedFields": [old]}}) == [
        {**old, "operation": "Apply"}]


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
