"""A dict-backed stand-in for the Kubernetes API, to drive one ``Reconciler.step`` directly.

:class:`FakeKube` subclasses the real :class:`antre_operator.kube.KubeClient` and replaces only
``request``, so ``get``/``patch``/``apply`` run their real code. It applies JSON merge patches
like the API server, creates an object a server-side apply names, stamps resourceVersions and
records every request, so tests can assert which writes a step made. It keeps no managed
fields: an apply to an existing object is merged in, so what server-side apply removes is
tested on the real API server (tests/e2e). :func:`reconciler` builds a Reconciler with an empty child cache
(as right after an operator restart) and records the Events it posts.
"""

from __future__ import annotations

import contextlib
import copy
import json
from collections.abc import AsyncIterator, Mapping
from typing import Any

import kopf
import pytest
from antre_operator import kube, reconciling, settings


def merge_patch(target: Any, patch: Any) -> Any:
    """RFC 7386."""
    if not isinstance(patch, Mapping):
        return copy.deepcopy(patch)
    result = dict(target) if isinstance(target, Mapping) else {}
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        else:
            result[key] = merge_patch(result.get(key), value)
    return result


class FakeKube(kube.KubeClient):
    def __init__(self) -> None:  # no session, no configuration
        self.objects: dict[str, dict[str, Any]] = {}
        self.requests: list[tuple[str, str, Any]] = []
        self.fail: BaseException | None = None
        self.refuse_creates: BaseException | None = None
        """Raised by every create (e.g. in a namespace being deleted), other requests work."""
        self._version = 0

    async def close(self) -> None:
        pass

    def put(self, kind: str, namespace: str, name: str, body: Mapping[str, Any]) -> None:
        """Create an object behind the operator's back (no request recorded)."""
        obj = json.loads(json.dumps(body))
        obj.setdefault("metadata", {}).update(name=name, namespace=namespace)
        self._stamp(obj)
        self.objects[kube.path_of(kind, namespace, name)] = obj

    def live(self, kind: str, namespace: str, name: str) -> dict[str, Any] | None:
        return self.objects.get(kube.path_of(kind, namespace, name))

    def writes(self) -> list[tuple[str, str, Any]]:
        return [r for r in self.requests if r[0] != "GET"]

    def _stamp(self, obj: dict[str, Any]) -> None:
        self._version += 1
        obj["metadata"]["resourceVersion"] = str(self._version)
        obj["metadata"].setdefault("uid", f"uid-of-{obj['metadata']['name']}-{self._version}")

    async def request(self, method: str, path: str, *, body: Any = None,
                      query: Mapping[str, str] | None = None,
                      content_type: str = "application/json") -> Any:
        self.requests.append((method, path, copy.deepcopy(body)))
        if self.fail is not None:
            raise self.fail
        if method == "GET" and path in self.objects:
            return copy.deepcopy(self.objects[path])
        if method == "GET" and path.endswith("/pods"):
            return {"items": [copy.deepcopy(v) for k, v in self.objects.items()
                              if k.startswith(path + "/")]}
        if method == "PATCH" and content_type == kube.APPLY_PATCH and path not in self.objects:
            if self.refuse_creates is not None:
                raise self.refuse_creates
            obj = json.loads(json.dumps(body))
            self._stamp(obj)
            self.objects[path] = obj
            return copy.deepcopy(obj)
        subresource = None
        if path.endswith("/status"):
            path, subresource = path.removesuffix("/status"), "status"
        if method == "PATCH" and path in self.objects:
            sent_uid = ((body or {}).get("metadata") or {}).get("uid") if isinstance(body, dict) else None
            if sent_uid is not None and sent_uid != self.objects[path]["metadata"].get("uid"):
                raise kube.Replaced(422, "metadata.uid: Invalid value: field is immutable")
            obj = merge_patch(self.objects[path], body)
            del subresource
            if obj == self.objects[path]:
                return copy.deepcopy(obj)  # nothing changed: the resourceVersion stays
            self._stamp(obj)
            self.objects[path] = obj
            return copy.deepcopy(obj)
        if method == "DELETE" and path in self.objects:
            wanted = ((body or {}).get("preconditions") or {}).get("uid")
            if wanted is not None and wanted != self.objects[path]["metadata"]["uid"]:
                raise kube.Conflict(409, "Precondition failed: UID in precondition")
            del self.objects[path]
            return {}
        raise kube.KubeError(404, "not found")


JOBQUEUE_UID = "uid-1"


def jobqueue_body(name: str, namespace: str, spec: dict[str, Any], *,
                  generation: int = 1) -> dict[str, Any]:
    """A JobQueue as the API server returns it: give a changed spec a new ``generation``, as
    the server does (the operator parses a spec once per generation)."""
    return {"apiVersion": f"{settings.GROUP}/{settings.VERSION}", "kind": settings.KIND,
            "metadata": {"name": name, "namespace": namespace, "uid": JOBQUEUE_UID,
                         "generation": generation},
            "spec": spec}


def reconciler(monkeypatch: pytest.MonkeyPatch, fake: FakeKube, *, namespace: str, name: str,
               ) -> tuple[reconciling.Reconciler, list[dict[str, Any]]]:
    """A Reconciler as right after an operator restart: nothing cached; Events recorded."""
    events: list[dict[str, Any]] = []
    monkeypatch.setattr(kopf, "event", lambda body, **kw: events.append(kw))
    state = reconciling.OperatorState(
        settings=settings.OperatorSettings(metrics_port=None, redis_timeout_s=1.0))
    state.kube = fake
    return reconciling.Reconciler(state, namespace=namespace, name=name), events


@contextlib.asynccontextmanager
async def closing(rec: reconciling.Reconciler) -> AsyncIterator[reconciling.Reconciler]:
    """Closes the Reconciler (its Redis client) however the steps inside end."""
    try:
        yield rec
    finally:
        await rec.close()
