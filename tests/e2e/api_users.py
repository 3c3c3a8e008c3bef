"""Raw JSON requests and watches as one user of the API server, for the test's own controllers.

The test kubelet acts as two users (the Node and the scheduler), each with a kubeconfig of its
own; :class:`ApiUser` sends their requests through the ``kubernetes`` package's HTTP client
(its TLS and credential handling) without its models: dicts in, dicts out. :meth:`ApiUser.watch`
is the list-then-watch loop every informer runs, and :meth:`ApiUser.close` interrupts the
watches blocked in a read from another thread, so a fixture stops at once.
"""

from __future__ import annotations

import json
import threading
import time
import urllib.parse
from collections.abc import Generator, Iterator, Mapping
from pathlib import Path
from typing import Any

import kubernetes
from kubernetes.watch.watch import iter_resp_lines

#: Server-side timeout of one watch request, seconds: the loop starts a new one after it.
WATCH_TIMEOUT_S = 60


class ApiError(AssertionError):
    """The API server answered with an error the caller did not expect."""

    def __init__(self, method: str, path: str, status: int, body: Any) -> None:
        message = body.get("message") if isinstance(body, dict) else body
        super().__init__(f"{method} {path} -> {status}: {message}")
        self.status = status


class ApiUser:
    """Requests as the user of ``kubeconfig``."""

    def __init__(self, kubeconfig: Path) -> None:
        config = kubernetes.client.Configuration()
        kubernetes.config.load_kube_config(  # type: ignore[no-untyped-call]
            config_file=str(kubeconfig), client_configuration=config)
        self.host = config.host.rstrip("/")
        self._client = kubernetes.client.ApiClient(config)
        self._open: set[Any] = set()
        self._lock = threading.Lock()
        self._closed = threading.Event()

    def _url(self, path: str, query: Mapping[str, str] | None) -> str:
        return self.host + path + ("?" + urllib.parse.urlencode(query) if query else "")

    def request(self, method: str, path: str, body: Any = None, *,
                query: Mapping[str, str] | None = None,
                content_type: str = "application/json",
                expect: tuple[int, ...] = (200, 201, 202)) -> Any:
        """The decoded answer; an :class:`ApiError` for a status outside ``expect``."""
        headers = {"Accept": "application/json", "Content-Type": content_type}
        response = self._client.call_api(method, self._url(path, query), headers, body,
                                         _request_timeout=30)
        data = response.read()  # type: ignore[no-untyped-call]
        answer = json.loads(data) if data else None
        if response.status not in expect:
            raise ApiError(method, path, response.status, answer)
        return answer

    def watch(self, path: str, query: Mapping[str, str]) -> Iterator[tuple[str, Any]]:
        """("LIST", items) after each listing, then ("ADDED" | "MODIFIED" | "DELETED", object)
        per change, until :meth:`close`. Lists again when the server says the version is too
        old (410), and when a watch breaks, so no change is missed."""
        version: str | None = None
        while not self._closed.is_set():
            try:
                if version is None:
                    listing = self.request("GET", path, query=query)
                    version = listing["metadata"]["resourceVersion"]
                    yield "LIST", listing["items"]
                version = yield from self._watch_from(path, query, version)
            except Exception:
                if self._closed.is_set():
                    return
                version = None  # list again: what changed meanwhile is in the new listing
                time.sleep(0.2)

    def _watch_from(self, path: str, query: Mapping[str, str],
                    version: str) -> Generator[tuple[str, Any], None, str | None]:
        """One watch request; returns the version to go on from (None: list again)."""
        params = {**query, "watch": "true", "resourceVersion": version,
                  "allowWatchBookmarks": "true", "timeoutSeconds": str(WATCH_TIMEOUT_S)}
        response = self._client.call_api("GET", self._url(path, params),
                                         {"Accept": "application/json"},
                                         _request_timeout=(10, WATCH_TIMEOUT_S + 10)).response
        with self._lock:
            if self._closed.is_set():
                response.release_conn()
                return None
            self._open.add(response)
        try:
            if response.status != 200:
                return None
            for line in iter_resp_lines(response):  # type: ignore[no-untyped-call]
                if not line:
                    continue
                event = json.loads(line)
                if event["type"] == "ERROR":  # 410 Gone: the version is compacted away
                    return None
                version = event["object"]["metadata"]["resourceVersion"]
                if event["type"] != "BOOKMARK":
                    yield event["type"], event["object"]
            return version
        finally:
            with self._lock:
                self._open.discard(response)
            response.release_conn()

    def close(self) -> None:
        """End every watch, including one blocked in a read in another thread."""
        self._closed.set()
        with self._lock:
            for response in list(self._open):
                response.shutdown()
        self._client.close()  # type: ignore[no-untyped-call]
