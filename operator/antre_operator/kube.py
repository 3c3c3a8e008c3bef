"""The only module that calls the Kubernetes API (kopf's own watching and events aside).

A small dict-in, dict-out aiohttp client that borrows the official ``kubernetes`` package's
configuration loading (in-cluster service account, else kubeconfig, with token refresh).
On top: :func:`KubeClient.apply`, server-side apply of a child under one field manager, after
checking that the object of that name (if any) is this JobQueue's or one it may adopt. The API
server merges, knows defaults, list keys and quantities, and removes what the operator applied
before and no longer applies; fields others set (labels, annotations) stay theirs.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import ssl
from collections.abc import Mapping
from typing import Any, Final
from urllib.parse import quote

import aiohttp
import kubernetes

from antre_operator import settings

logger = logging.getLogger(__name__)

#: kind -> (API prefix, plural) of everything the operator touches.
RESOURCES: Final[Mapping[str, tuple[str, str]]] = {
    "Deployment": ("/apis/apps/v1", "deployments"),
    "CronJob": ("/apis/batch/v1", "cronjobs"),
    "Service": ("/api/v1", "services"),
    "Pod": ("/api/v1", "pods"),
    "Secret": ("/api/v1", "secrets"),
    settings.KIND: (f"/apis/{settings.GROUP}/{settings.VERSION}", settings.PLURAL),
}
MERGE_PATCH: Final = "application/merge-patch+json"
APPLY_PATCH: Final = "application/apply-patch+yaml"
"""Server-side apply; JSON is YAML, so the body is sent as JSON."""
JSON_PATCH: Final = "application/json-patch+json"
#: The field manager of everything the operator applies (and the name the API server gave its
#: writes before it applied server-side: the User-Agent's first word).
FIELD_MANAGER: Final = "antre-operator"


class KubeError(Exception):
    """The API answered with an error status (other than the ones callers expect)."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(f"HTTP {status}: {message}")
        self.status = status


class Conflict(KubeError):
    """409: the object already exists (create) or changed meanwhile."""


class Replaced(KubeError):
    """422 for the uid an apply named (:meth:`KubeClient.apply`): the name holds another
    object than the one the caller saw (that one deleted, another made since)."""


class NamespaceTerminating(KubeError):
    """403: the namespace is being deleted, and nothing new may be created in it."""


def error_for(status: int, reason: str | None, text: str) -> KubeError:
    """The exception for an error answer: its message, and the class callers tell apart."""
    try:
        answer = json.loads(text)
    except ValueError:
        answer = None
    if not isinstance(answer, dict):
        answer = {}
    message = str(answer.get("message") or reason or text[:200])
    causes = (answer.get("details") or {}).get("causes") or []
    if status == 409:
        return Conflict(status, message)
    if status == 422 and any(cause.get("field") == "metadata.uid" for cause in causes):
        return Replaced(status, message)
    if status == 403 and any(cause.get("reason") == "NamespaceTerminating" for cause in causes):
        return NamespaceTerminating(status, message)
    return KubeError(status, message)


class Unreachable(KubeError):
    """No answer: the connection failed or the request timed out (no HTTP status)."""

    def __init__(self, method: str, path: str, error: BaseException) -> None:
        detail = str(error) or type(error).__name__
        Exception.__init__(self, f"{method} {path}: no answer from the API server: {detail}")
        self.status = 0


class NotOwned(KubeError):
    """An object with a child's name exists but another controller (or none) owns it: the
    operator refuses to adopt it, since patching would take over someone else's object."""

    def __init__(self, kind: str, namespace: str, name: str, controller: str) -> None:
        Exception.__init__(
            self, f"{kind} {namespace}/{name} already exists and is not ours ({controller}); "
                  f"not touching it: delete or rename it, or rename the JobQueue")
        self.status = 409


def _controller_ref(obj: Mapping[str, Any]) -> Mapping[str, Any] | None:
    for ref in (obj.get("metadata") or {}).get("ownerReferences") or []:
        if ref.get("controller"):
            return ref  # type: ignore[no-any-return]
    return None


def controller_uid(obj: Mapping[str, Any]) -> str | None:
    """The uid of the object's controller ownerReference, if it has one."""
    ref = _controller_ref(obj)
    return None if ref is None else str(ref.get("uid"))


def ours(live: Mapping[str, Any], *, jobqueue: str, uid: str) -> bool:
    """Is ``live`` (in the JobQueue's namespace) a child of JobQueue ``jobqueue`` with ``uid``,
    or one the operator may adopt for it?

    Adoptable: a child of an earlier JobQueue with the same name (deleted and recreated: names
    are unique in a namespace, so a different uid means that owner is gone), and an object
    without a controller whose labels say the operator made it for this JobQueue (orphaned by
    ``kubectl delete jobqueue --cascade=orphan``).
    """
    ref = _controller_ref(live)
    if ref is None:
        labels = (live.get("metadata") or {}).get("labels") or {}
        return (labels.get(settings.LABEL_MANAGED_BY) == settings.MANAGED_BY
                and labels.get(settings.LABEL_JOBQUEUE) == jobqueue)
    if str(ref.get("uid")) == uid:
        return True
    return (ref.get("kind") == settings.KIND and ref.get("name") == jobqueue
            and str(ref.get("apiVersion", "")).split("/")[0] == settings.GROUP)


def check_owned(desired: Mapping[str, Any], live: Mapping[str, Any]) -> None:
    """Raise :class:`NotOwned` unless ``live`` has the controller ``desired`` declares (or is
    adoptable for it, see :func:`ours`)."""
    wanted = _controller_ref(desired)
    if wanted is None:
        return
    if not ours(live, jobqueue=str(wanted.get("name")), uid=str(wanted.get("uid"))):
        meta = desired["metadata"]
        found = controller_uid(live)
        refs = [f"{r.get('kind')} {r.get('name')}"
                for r in (live.get("metadata") or {}).get("ownerReferences") or []
                if r.get("controller")]
        controller = (f"controlled by {refs[0]} (uid {found})" if refs
                      else "it has no controller ownerReference")
        raise NotOwned(desired["kind"], meta["namespace"], meta["name"], controller)


def segment(value: str) -> str:
    """``value`` as one path segment: percent-encoded, and never "." or ".." (which HTTP
    clients and servers collapse, so "../../kube-system/secrets/x" as a name would reach
    another namespace). Names are checked against the object-name pattern before they get
    here; this is the second line."""
    if value in ("", ".", ".."):
        raise ValueError(f"not an object name: {value!r}")
    return quote(value, safe="")


def path_of(kind: str, namespace: str, name: str | None = None, subresource: str | None = None,
            ) -> str:
    prefix, plural = RESOURCES[kind]
    path = f"{prefix}/namespaces/{segment(namespace)}/{plural}"
    if name is not None:
        path += f"/{segment(name)}"
    if subresource is not None:
        path += f"/{subresource}"
    return path


class NotAskedFor(KubeError):
    """The API server answered with another object than the one asked for."""

    def __init__(self, kind: str, namespace: str, name: str, got: Mapping[str, Any]) -> None:
        meta = got.get("metadata") or {}
        Exception.__init__(self, f"asked for {kind} {namespace}/{name}, got "
                                 f"{got.get('kind')} {meta.get('namespace')}/{meta.get('name')}")
        self.status = 0


def check_identity(kind: str, namespace: str, name: str, got: Mapping[str, Any]) -> None:
    """Raise :class:`NotAskedFor` unless ``got`` is ``kind`` ``namespace/name``."""
    meta = got.get("metadata") or {}
    if (meta.get("namespace"), meta.get("name")) != (namespace, name) or (
            got.get("kind") not in (None, kind)):
        raise NotAskedFor(kind, namespace, name, got)


def resource_version(obj: Mapping[str, Any] | None) -> str | None:
    """The object's resourceVersion (None: no object, or none stamped)."""
    value = ((obj or {}).get("metadata") or {}).get("resourceVersion")
    return None if value is None else str(value)


#: Where a :func:`child_view` carries the written state of the object it was made from (no
#: object the API server sends has such a top-level field).
WRITTEN_STATE: Final = "antre.dev/written-state"
#: The metadata a :func:`child_view` keeps: identity and order (uid, resourceVersion), hand edits
#: (generation), and what :func:`ours` reads (labels, ownerReferences).
_VIEW_METADATA: Final = ("name", "namespace", "uid", "resourceVersion", "generation", "labels",
                         "ownerReferences")


def written_state(obj: Mapping[str, Any] | None) -> str | None:
    """What of a child anyone but its controllers writes: spec, labels, annotations and owners,
    exactly as the API server returned them, as a digest (None: no object). Status is left out:
    the Deployment controller rewrites it as pods come and go, which is no reason to apply
    again. A digest, not the text: the operator keeps one per child, and a child's spec may be
    large (the user's env)."""
    if obj is None:
        return None
    kept = obj.get(WRITTEN_STATE)
    if isinstance(kept, str):
        return kept
    meta = obj.get("metadata") or {}
    text = json.dumps([obj.get("spec"), meta.get("labels"), meta.get("annotations"),
                       meta.get("ownerReferences")], sort_keys=True)
    return hashlib.sha256(text.encode()).hexdigest()


def child_view(obj: Mapping[str, Any]) -> dict[str, Any]:
    """What the operator keeps of a child between steps, instead of the whole object: its
    identity and version, labels and owners (:func:`ours`), generation (a hand edit),
    spec.replicas, status (availability, the reaper's runs) and the digest of its written state
    (:func:`written_state` of the view is that of ``obj``). The rest (pod template, annotations,
    managedFields) is what someone else may make large, and no decision reads it; managedFields
    stay only while :func:`upgraded_managed_fields` has work to do. A copy: nothing is shared
    with ``obj``."""
    meta = obj.get("metadata") or {}
    kept = {key: meta[key] for key in _VIEW_METADATA if key in meta}
    if upgraded_managed_fields(obj) is not None:
        kept["managedFields"] = meta["managedFields"]
    view: dict[str, Any] = {"apiVersion": obj.get("apiVersion"), "kind": obj.get("kind"),
                            "metadata": kept, WRITTEN_STATE: written_state(obj)}
    spec = obj.get("spec")
    if isinstance(spec, Mapping) and "replicas" in spec:
        view["spec"] = {"replicas": spec["replicas"]}
    if obj.get("status") is not None:
        view["status"] = obj["status"]
    copied: dict[str, Any] = json.loads(json.dumps(view))
    return copied


def _merged_fields(a: Mapping[str, Any], b: Mapping[str, Any]) -> dict[str, Any]:
    """The union of two managedFields ``fieldsV1`` sets (tries of ``{}`` leaves)."""
    merged = dict(a)
    for key, value in b.items():
        merged[key] = _merged_fields(merged.get(key) or {}, value or {})
    return merged


def upgraded_managed_fields(live: Mapping[str, Any]) -> list[dict[str, Any]] | None:
    """``live``'s managedFields with the operator's merge-patch ownership (operation Update, as
    it wrote before it applied server-side) turned into apply ownership, or None when there is
    none. Without this, fields the old operator set would stay forever: an apply removes only
    what the same manager applied (kubectl's csaupgrade does the same for kubectl)."""
    entries = (live.get("metadata") or {}).get("managedFields") or []
    ours = [e for e in entries if e.get("manager") == FIELD_MANAGER
            and e.get("operation") == "Update" and not e.get("subresource")]
    if not ours:
        return None
    applied = [e for e in entries if e.get("manager") == FIELD_MANAGER
               and e.get("operation") == "Apply" and not e.get("subresource")]
    fields: dict[str, Any] = {}
    for entry in applied + ours:
        fields = _merged_fields(fields, entry.get("fieldsV1") or {})
    entry = {**(applied or ours)[0], "operation": "Apply", "fieldsV1": fields}
    return [e for e in entries if e not in ours and e not in applied] + [entry]


def load_configuration() -> kubernetes.client.Configuration:
    """In-cluster service account credentials, else the kubeconfig (KUBECONFIG or ~/.kube)."""
    configuration = kubernetes.client.Configuration()
    try:
        kubernetes.config.load_incluster_config(  # type: ignore[no-untyped-call]
            client_configuration=configuration)
    except kubernetes.config.ConfigException:
        # The package reads KUBECONFIG once at import; read it now, as kubectl would.
        kubernetes.config.load_kube_config(  # type: ignore[no-untyped-call]
            config_file=os.environ.get("KUBECONFIG"), client_configuration=configuration)
    return configuration


def bearer_token(configuration: kubernetes.client.Configuration) -> str | None:
    """The bearer token of the loaded credentials, without its "Bearer " prefix.

    The ``kubernetes`` package stores it under "BearerToken" (older releases: "authorization"),
    usually with the prefix already in the value; reading it runs the refresh hook, so rotated
    service-account and exec-plugin tokens are current.
    """
    for identifier in ("BearerToken", "authorization"):
        value = configuration.get_api_key_with_prefix(identifier)
        if value:
            scheme, _, token = value.partition(" ")
            return token.strip() if scheme.lower() == "bearer" and token else value.strip()
    return None


def _ssl_context(configuration: kubernetes.client.Configuration) -> ssl.SSLContext | bool:
    if not configuration.host.startswith("https://"):
        return False
    if not configuration.verify_ssl:
        return False
    context = ssl.create_default_context(cafile=configuration.ssl_ca_cert)
    if configuration.cert_file:
        context.load_cert_chain(configuration.cert_file, configuration.key_file)
    return context


class KubeClient:
    """Async HTTP to the API server with the ``kubernetes`` package's credentials; dicts in/out.

    Create it inside the running event loop (kopf's startup handler) and ``close()`` it at
    cleanup.
    """

    def __init__(self, *, timeout_s: float,
                 configuration: kubernetes.client.Configuration | None = None) -> None:
        self._config = configuration or load_configuration()
        self._ssl = _ssl_context(self._config)
        self._session = aiohttp.ClientSession(
            timeout=aiohttp.ClientTimeout(total=timeout_s),
            headers={"Accept": "application/json", "User-Agent": "antre-operator"})

    async def close(self) -> None:
        await self._session.close()

    def _auth_headers(self) -> dict[str, str]:
        token = bearer_token(self._config)
        return {"Authorization": f"Bearer {token}"} if token else {}

    async def request(self, method: str, path: str, *, body: Any = None,
                      query: Mapping[str, str] | None = None,
                      content_type: str = "application/json") -> Any:
        headers = self._auth_headers()
        data = None
        if body is not None:
            headers["Content-Type"] = content_type
            data = json.dumps(body)
        url = self._config.host.rstrip("/") + path
        try:
            async with self._session.request(method, url, data=data, params=query,
                                             headers=headers, ssl=self._ssl) as response:
                text = await response.text()
        except (aiohttp.ClientError, TimeoutError) as exc:
            # Callers handle KubeError (a condition, a held scale-down); anything else would
            # escape the step.
            raise Unreachable(method, path, exc) from exc
        if response.status >= 400:
            raise error_for(response.status, response.reason, text)
        try:
            return json.loads(text) if text else None
        except ValueError as exc:
            raise KubeError(response.status, f"{method} {path}: not JSON: {text[:200]!r}",
                            ) from exc

    async def get(self, kind: str, namespace: str, name: str) -> dict[str, Any] | None:
        """The object, None when it does not exist; :class:`NotAskedFor` when the answer is
        another object (the operator acts on what it reads: a Secret's URL, a child's owner)."""
        try:
            got = dict(await self.request("GET", path_of(kind, namespace, name)))
        except KubeError as exc:
            if exc.status == 404:
                return None
            raise
        check_identity(kind, namespace, name, got)
        return got

    async def patch(self, kind: str, namespace: str, name: str, body: Mapping[str, Any], *,
                    subresource: str | None = None) -> dict[str, Any]:
        return dict(await self.request("PATCH", path_of(kind, namespace, name, subresource),
                                       body=dict(body), content_type=MERGE_PATCH))

    async def delete(self, kind: str, namespace: str, name: str, *,
                     uid: str | None = None) -> bool:
        """False when there is no such object. With ``uid``, only the object with that uid:
        the API server answers 409 (:class:`Conflict`) when the name holds another one, made
        since the caller read it."""
        body: dict[str, Any] = {"propagationPolicy": "Background"}
        if uid is not None:
            body["preconditions"] = {"uid": uid}
        try:
            await self.request("DELETE", path_of(kind, namespace, name), body=body)
        except KubeError as exc:
            if exc.status == 404:
                return False
            raise
        return True

    async def list(self, kind: str, namespace: str, *,
                   labels: Mapping[str, str]) -> list[dict[str, Any]]:
        selector = ",".join(f"{k}={v}" for k, v in labels.items())
        result = await self.request("GET", path_of(kind, namespace),
                                    query={"labelSelector": selector})
        items = (result or {}).get("items") or []
        # Filter here too: the selector is only a request, and the result must be exact.
        return [dict(item) for item in items
                if all((item.get("metadata", {}).get("labels") or {}).get(k) == v
                       for k, v in labels.items())]

    async def apply(self, desired: Mapping[str, Any],
                    live: Mapping[str, Any] | None) -> tuple[str, dict[str, Any]]:
        """Server-side apply of one child: returns (action, the object as now stored).

        ``action`` is "created", "changed" or "unchanged" (spec, labels, annotations and owners
        as they were: :func:`written_state`). ``live`` is the caller's last view; None (believed
        missing) is read again first, since an apply would take over an object of that name
        that someone else made since. An existing object whose controller ownerReference is
        not the desired one is never applied to, unless it is adoptable (:func:`ours`):
        :class:`NotOwned`. Fields the operator owns are taken back from whoever changed them
        (force): a hand edit of the image or the replicas is put back.
        """
        meta = desired["metadata"]
        kind, namespace, name = desired["kind"], meta["namespace"], meta["name"]
        if live is None:
            live = await self.get(kind, namespace, name)
        body = dict(desired)
        if live is not None:
            check_owned(desired, live)
            live = await self._upgrade_ownership(kind, namespace, name, live)
            # The uid of the object checked: a view from a watch can be late, and the name
            # may hold a stranger's object by now, which the apply would take over. The API
            # server refuses a uid that is not the object's (422, as :class:`Replaced`).
            uid = (live.get("metadata") or {}).get("uid")
            if uid:
                body["metadata"] = {**meta, "uid": uid}
        stored = dict(await self.request(
            "PATCH", path_of(kind, namespace, name), body=body,
            query={"fieldManager": FIELD_MANAGER, "force": "true"}, content_type=APPLY_PATCH))
        check_identity(kind, namespace, name, stored)
        if live is None:
            return "created", stored
        changed = written_state(stored) != written_state(live)
        return ("changed" if changed else "unchanged"), stored

    async def _upgrade_ownership(self, kind: str, namespace: str, name: str,
                                 live: Mapping[str, Any]) -> Mapping[str, Any]:
        """Once per child made by a merge-patching operator: see :func:`upgraded_managed_fields`.
        The resourceVersion test makes it refuse if the object changed meanwhile."""
        managed = upgraded_managed_fields(live)
        if managed is None:
            return live
        return dict(await self.request(
            "PATCH", path_of(kind, namespace, name), content_type=JSON_PATCH, body=[
                {"op": "test", "path": "/metadata/resourceVersion",
                 "value": resource_version(live)},
                {"op": "replace", "path": "/metadata/managedFields", "value": managed}]))
