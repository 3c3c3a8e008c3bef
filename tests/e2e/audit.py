"""Reading the API server's audit log: who sent which requests, counted per verb.

The test control plane writes one JSON event per request when it completes, and one more when
a watch starts (the policy in ``control_plane.py``), at Metadata level: user, verb, resource,
response code, no bodies. Each request is counted once, at its first event, so a watch counts
when it starts. A :class:`Window` starts at the current end of the log, so a test counts only
the requests made after it opened one.
"""

from __future__ import annotations

import collections
import dataclasses
import datetime
import json
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

#: Verbs that change something (``kubectl auth can-i`` spells them the same).
WRITE_VERBS = frozenset({"create", "update", "patch", "delete", "deletecollection"})


@dataclasses.dataclass(frozen=True)
class Request:
    """One audit event, reduced to what the tests ask about."""

    user: str
    """The effective user: the impersonated one if any, else the authenticated one."""
    verb: str
    resource: str
    """``resource`` or ``resource/subresource``, e.g. ``jobqueues/status``; "" for non-resource URLs."""
    namespace: str
    name: str
    code: int
    uri: str
    audit_id: str
    at: float = 0.0
    """When the API server received it (Unix time, microseconds), for timelines."""

    @classmethod
    def from_event(cls, event: Mapping[str, Any]) -> Request:
        ref = event.get("objectRef") or {}
        resource = ref.get("resource", "")
        if ref.get("subresource"):
            resource += "/" + ref["subresource"]
        user = (event.get("impersonatedUser") or event.get("user") or {}).get("username", "")
        return cls(user=user, verb=event.get("verb", ""), resource=resource,
                   namespace=ref.get("namespace", ""), name=ref.get("name", ""),
                   code=int((event.get("responseStatus") or {}).get("code") or 0),
                   uri=event.get("requestURI", ""), audit_id=event.get("auditID", ""),
                   at=_unix_time(event.get("requestReceivedTimestamp")))

    @property
    def is_write(self) -> bool:
        return self.verb in WRITE_VERBS

    def __str__(self) -> str:
        where = "/".join(p for p in (self.namespace, self.resource, self.name) if p)
        return f"{self.user} {self.verb} {where or self.uri} -> {self.code}"


def _unix_time(stamp: str | None) -> float:
    """An audit timestamp ("2026-01-02T03:04:05.678901Z") as Unix time; 0.0 when absent."""
    return datetime.datetime.fromisoformat(stamp).timestamp() if stamp else 0.0


class AuditLog:
    def __init__(self, path: Path) -> None:
        self.path = path

    def requests(self, *, start: int = 0) -> Iterator[Request]:
        """Every request logged from byte offset ``start`` on, once each (a torn last line is
        skipped: the server is still writing it)."""
        if not self.path.exists():
            return
        seen: set[str] = set()
        with self.path.open("rb") as f:
            f.seek(start)
            for line in f:
                if not line.endswith(b"\n"):
                    break
                request = Request.from_event(json.loads(line))
                if request.audit_id not in seen:
                    seen.add(request.audit_id)
                    yield request

    def end(self) -> int:
        return self.path.stat().st_size if self.path.exists() else 0

    def window(self) -> Window:
        """Requests from now on."""
        return Window(self, self.end())


@dataclasses.dataclass
class Window:
    log: AuditLog
    start: int

    def requests(self, user: str | None = None) -> list[Request]:
        return [r for r in self.log.requests(start=self.start) if user is None or r.user == user]

    def writes(self, user: str) -> list[Request]:
        return [r for r in self.requests(user) if r.is_write]

    def counts(self, user: str) -> dict[str, int]:
        """Requests of ``user`` per verb, e.g. {"get": 3, "watch": 6}."""
        return dict(sorted(collections.Counter(r.verb for r in self.requests(user)).items()))


def format_counts(counts: Mapping[str, int]) -> str:
    return ", ".join(f"{verb}={n}" for verb, n in counts.items()) or "no requests"
