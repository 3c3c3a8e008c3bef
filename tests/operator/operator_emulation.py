"""The real operator (kopf) against kmock's in-memory Kubernetes API, for integration tests.

* :class:`Emulator` extends kmock's KubernetesEmulator with what kopf and our client rely on:
  resourceVersion, uid, creationTimestamp and generation (bumped on spec changes), and a
  server-side apply that creates a missing object (an apply to an existing one is merged in:
  no managed fields here; what an apply removes is tested on the real API server).
* :func:`declare_resources` declares the API surface: the CRD resource (kopf only starts
  watching once ``customresourcedefinitions`` is discoverable), JobQueues with status/scale
  subresources, and the children's kinds.
* :class:`OperatorThread` runs ``antre_operator.__main__.run`` (kopf.operator) in its own thread
  and event loop, as ``antre-operator`` would, while the test's loop serves the emulator.
* :func:`eventually` waits on a deadline without blocking the emulator's loop.

The emulator has no garbage collector, no /scale endpoint and no ReplicaSets: tests assert
ownerReferences, patch spec.replicas like ``kubectl scale`` would, and create worker Pods
themselves.
"""

from __future__ import annotations

import asyncio
import copy
import datetime
import threading
import time
import uuid
from collections.abc import Awaitable, Callable, Mapping
from pathlib import Path
from typing import Any

import attrs
import jsonpatch
import kmock
import yaml
from antre_operator import settings
from antre_operator.__main__ import run_in_own_loop
from kmock._internal import enums
from operator_samples import CRD_PATH

WRITE_METHODS = {"POST", "PUT", "PATCH", "DELETE"}


@attrs.define(kw_only=True)
class Emulator(kmock.KubernetesEmulator):
    """KubernetesEmulator plus object metadata the API server would maintain."""

    _resource_version: int = attrs.field(default=0, init=False)

    async def _handle(self, request: kmock.Request) -> Any:
        if (request.resource is not None and request.action == enums.action.UPDATE
                and "apply-patch" in request.headers.get("Content-Type", "")
                and self._current(request) is None):
            # A server-side apply creates: an empty object, which the apply then fills in.
            self.objects[request.resource, request.namespace, request.name] = {
                "apiVersion": request.data.get("apiVersion"), "kind": request.data.get("kind"),
                "metadata": {"name": request.name, "namespace": request.namespace,
                             "uid": str(uuid.uuid4()), "generation": 0,
                             "resourceVersion": self._next_version(),
                             "creationTimestamp": datetime.datetime.now(datetime.UTC)
                             .strftime("%Y-%m-%dT%H:%M:%SZ")}}
        if request.resource is not None and request.action in (enums.action.CREATE,
                                                                 enums.action.UPDATE):
            self._stamp(request)
        try:
            return await super()._handle(request)
        except jsonpatch.JsonPatchTestFailed as exc:
            # The API server answers a failed "test" operation (kopf tests resourceVersion)
            # with 422; kopf then retries on the next event. kmock would answer 500, which
            # kopf retries with the same stale patch for a minute.
            raise kmock.KubernetesError(status=422, reason="Invalid", message=str(exc)) from None

    def _next_version(self) -> str:
        self._resource_version += 1
        return str(self._resource_version)

    def _stamp(self, request: kmock.Request) -> None:
        data = request.data
        version = self._next_version()
        if request.action == enums.action.CREATE and isinstance(data, dict):
            meta = data.setdefault("metadata", {})
            meta.setdefault("namespace", request.namespace)
            if not meta.get("name") and meta.get("generateName"):  # kopf's Events use it
                meta["name"] = meta["generateName"] + uuid.uuid4().hex[:5]
            meta.setdefault("uid", str(uuid.uuid4()))
            meta.setdefault("creationTimestamp",
                            datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ"))
            meta["generation"] = 1
            meta["resourceVersion"] = version
        elif isinstance(data, dict):
            meta = data.get("metadata")
            if not isinstance(meta, dict):
                meta = data["metadata"] = {}
            meta["resourceVersion"] = version
            if "spec" in data and request.subresource is None:
                old = self._current(request)
                if old is not None and old.get("spec") != _merged(old.get("spec"), data["spec"]):
                    meta["generation"] = int(old.get("metadata", {}).get("generation", 1)) + 1
        elif isinstance(data, list):  # a JSON patch (kopf's finalizers)
            data.append({"op": "replace", "path": "/metadata/resourceVersion", "value": version})

    def _current(self, request: kmock.Request) -> dict[str, Any] | None:
        for (resource, namespace, name), obj in self.objects.items():
            if (resource == request.resource and namespace == request.namespace
                    and name == request.name and not obj.deleted):
                return dict(obj.raw)
        return None

    @property
    def all_requests(self) -> list[kmock.Request]:
        return list(self._requests)

    def writes(self) -> list[kmock.Request]:
        return [r for r in self._requests if method_of(r) in WRITE_METHODS]

    def live(self, plural: str, namespace: str, name: str) -> dict[str, Any] | None:
        """The stored object (a deep copy), or None when absent or deleted."""
        for (resource, ns, obj_name), obj in self.objects.items():
            if resource.plural == plural and ns == namespace and obj_name == name:
                return None if obj.deleted else copy.deepcopy(dict(obj.raw))
        return None

    def events(self, namespace: str) -> list[dict[str, Any]]:
        return [copy.deepcopy(dict(obj.raw)) for (resource, ns, _), obj in self.objects.items()
                if resource.plural == "events" and ns == namespace and not obj.deleted]


def method_of(request: kmock.Request) -> str:
    return str(getattr(request.method, "value", request.method)).upper()


def _merged(old: Any, patch: Any) -> Any:
    if isinstance(old, Mapping) and isinstance(patch, Mapping):
        result = dict(old)
        for key, value in patch.items():
            if value is None:
                result.pop(key, None)
            else:
                result[key] = _merged(old.get(key), value)
        return result
    return patch


def declare_resources(k8s: Emulator) -> None:
    info = kmock.ResourceInfo
    every = ["get", "list", "watch", "create", "update", "patch", "delete"]
    k8s.resources["apiextensions.k8s.io/v1/customresourcedefinitions"] = info(
        kind="CustomResourceDefinition", namespaced=False, verbs=["get", "list", "watch"])
    k8s.resources[f"{settings.GROUP}/{settings.VERSION}/{settings.PLURAL}"] = info(
        kind=settings.KIND, singular="jobqueue", namespaced=True, verbs=every,
        shortnames=["jq"], subresources=["status", "scale"])
    k8s.resources["apps/v1/deployments"] = info(kind="Deployment", namespaced=True, verbs=every,
                                                subresources=["status", "scale"])
    k8s.resources["batch/v1/cronjobs"] = info(kind="CronJob", namespaced=True, verbs=every)
    k8s.resources["v1/services"] = info(kind="Service", namespaced=True, verbs=every)
    k8s.resources["v1/pods"] = info(kind="Pod", namespaced=True, verbs=every)
    k8s.resources["v1/secrets"] = info(kind="Secret", namespaced=True, verbs=every)
    k8s.resources["v1/events"] = info(kind="Event", namespaced=True, verbs=every)
    k8s.resources["v1/namespaces"] = info(kind="Namespace", namespaced=False, verbs=every)
    with Path(CRD_PATH).open() as f:
        crd = yaml.safe_load(f)
    k8s.objects["apiextensions.k8s.io/v1/customresourcedefinitions", None, crd["metadata"]["name"]] = crd


def write_kubeconfig(path: Path, server: str) -> Path:
    path.write_text(yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config", "current-context": "emulator",
        "clusters": [{"name": "emulator", "cluster": {"server": server}}],
        "users": [{"name": "tester", "user": {"token": "test-token"}}],
        "contexts": [{"name": "emulator", "context": {"cluster": "emulator", "user": "tester"}}],
    }))
    return path


class OperatorThread:
    """``antre_operator.__main__.run`` in a thread of its own, stopped through kopf's flag."""

    def __init__(self, ours: settings.OperatorSettings) -> None:
        self.settings = ours
        self.stop_flag = threading.Event()
        self.ready_flag = threading.Event()
        self.error: BaseException | None = None
        self.thread = threading.Thread(target=self._main, name="antre-operator", daemon=True)

    def _main(self) -> None:
        try:
            run_in_own_loop(self.settings, stop_flag=self.stop_flag, ready_flag=self.ready_flag)
        except BaseException as exc:  # reported by stop()
            self.error = exc

    async def start(self, timeout_s: float = 15.0) -> None:
        self.thread.start()
        if not await asyncio.to_thread(self.ready_flag.wait, timeout_s):
            raise AssertionError(f"the operator was not ready within {timeout_s}s: {self.error!r}")

    async def stop(self, timeout_s: float = 20.0) -> None:
        self.stop_flag.set()
        await asyncio.to_thread(self.thread.join, timeout_s)
        assert not self.thread.is_alive(), "the operator did not stop"
        if self.error is not None:
            raise AssertionError(f"the operator crashed: {self.error!r}") from self.error


async def eventually(predicate: Callable[[], Any | Awaitable[Any]], timeout_s: float = 10.0,
                     message: str = "condition", interval_s: float = 0.05,
                     describe: Callable[[], Any] | None = None) -> Any:
    """Poll ``predicate`` (sync or async) until truthy; fail after ``timeout_s``, with what
    ``describe`` returns then (the state that explains why the wait failed)."""
    deadline = time.monotonic() + timeout_s
    last: Any = None
    while time.monotonic() < deadline:
        try:
            last = predicate()
            if asyncio.iscoroutine(last):
                last = await last
        except (KeyError, IndexError, TypeError):
            last = None
        if last:
            return last
        await asyncio.sleep(interval_s)
    seen = "" if describe is None else f"; {describe()!r}"
    raise AssertionError(f"timed out after {timeout_s}s waiting for {message} "
                         f"(last: {last!r}){seen}")


def condition(obj: Mapping[str, Any] | None, type_: str) -> dict[str, Any] | None:
    for entry in ((obj or {}).get("status") or {}).get("conditions") or []:
        if entry.get("type") == type_:
            return dict(entry)
    return None


async def create(k8s: Emulator, body: Mapping[str, Any]) -> dict[str, Any]:
    """POST like ``kubectl create``; the watchers see it."""
    meta = body["metadata"]
    path = _collection_path(body["apiVersion"], body["kind"], meta["namespace"])
    async with k8s.post(path, json=dict(body)) as response:
        assert response.status in (200, 201), await response.text()
        return dict(await response.json())


async def patch(k8s: Emulator, path: str, body: Any) -> dict[str, Any]:
    async with k8s.patch(path, json=body,
                         headers={"Content-Type": "application/merge-patch+json"}) as response:
        assert response.status == 200, await response.text()
        return dict(await response.json())


async def delete(k8s: Emulator, path: str) -> None:
    async with k8s.delete(path) as response:
        assert response.status == 200, await response.text()


def _collection_path(api_version: str, kind: str, namespace: str) -> str:
    plural = {"JobQueue": "jobqueues", "Pod": "pods", "Secret": "secrets",
              "Deployment": "deployments", "CronJob": "cronjobs", "Service": "services"}[kind]
    prefix = "/api/v1" if api_version == "v1" else f"/apis/{api_version}"
    return f"{prefix}/namespaces/{namespace}/{plural}"


def object_path(kind: str, namespace: str, name: str) -> str:
    return f"{_collection_path(_API_VERSIONS[kind], kind, namespace)}/{name}"


_API_VERSIONS = {"JobQueue": f"{settings.GROUP}/{settings.VERSION}", "Pod": "v1",
                 "Secret": "v1", "Deployment": "apps/v1", "CronJob": "batch/v1",
                 "Service": "v1"}


def jobqueue(name: str, namespace: str, redis_url: str, **spec: Any) -> dict[str, Any]:
    body: dict[str, Any] = {
        "apiVersion": f"{settings.GROUP}/{settings.VERSION}",
        "kind": settings.KIND,
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"redis": {"url": redis_url}, **spec},
    }
    return body
