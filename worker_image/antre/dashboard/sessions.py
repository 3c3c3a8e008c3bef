"""Dashboard sessions: the API token exchanged for a signed cookie, and CSRF tokens bound to it.

Stateless, so any number of ``antre api`` replicas behind one Service accept each other's
sessions and nothing is stored in Redis: the cookie carries its expiry and a random session id,
signed with HMAC-SHA256 under a key derived from the API token. Changing the token therefore
ends every session at once. Without a token (``antre api`` run without authentication on
purpose) the key is random per process and sessions are anonymous, but the CSRF token is still
required on every action.

The CSRF token is an HMAC of the session id under the same key: a page from another site can
neither read it (SameSite=Strict, HttpOnly cookie, no CORS) nor compute it.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import secrets
import time
from collections import deque
from dataclasses import dataclass, field
from typing import Final

COOKIE_NAME: Final = "antre_session"
#: Version tag of the cookie format, first field of the value.
_FORMAT: Final = "v1"
_KEY_LABEL: Final = b"antre dashboard session v1"


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def signing_key(token: str | None) -> bytes:
    """The session key: derived from the API token, or random for this process without one."""
    if token is None:
        return secrets.token_bytes(32)
    return hmac.new(token.encode(), _KEY_LABEL, hashlib.sha256).digest()


@dataclass(frozen=True, slots=True)
class Session:
    session_id: str
    #: Seconds since the epoch after which the cookie is refused.
    expires_at_s: int


@dataclass(frozen=True, slots=True)
class SessionSigner:
    key: bytes
    ttl_s: int = 12 * 3600

    def _mac(self, message: str) -> str:
        return _b64(hmac.new(self.key, message.encode(), hashlib.sha256).digest())

    def issue(self, *, now_s: float | None = None) -> tuple[Session, str]:
        """A new session and its cookie value."""
        now_s = time.time() if now_s is None else now_s
        session = Session(session_id=_b64(secrets.token_bytes(18)),
                          expires_at_s=int(now_s) + self.ttl_s)
        body = f"{_FORMAT}.{session.expires_at_s}.{session.session_id}"
        return session, f"{body}.{self._mac(body)}"

    def verify(self, cookie: str | None, *, now_s: float | None = None) -> Session | None:
        """The session the cookie carries, or None when it is missing, forged or expired."""
        if not cookie or len(cookie) > 256:
            return None
        parts = cookie.split(".")
        if len(parts) != 4 or parts[0] != _FORMAT:
            return None
        body = ".".join(parts[:3])
        if not hmac.compare_digest(parts[3].encode(), self._mac(body).encode()):
            return None
        try:
            expires_at_s = int(parts[1])
        except ValueError:
            return None
        now_s = time.time() if now_s is None else now_s
        if expires_at_s < now_s:
            return None
        return Session(session_id=parts[2], expires_at_s=expires_at_s)

    def csrf_token(self, session: Session) -> str:
        return self._mac(f"csrf.{session.session_id}")

    def check_csrf(self, session: Session, given: str | None) -> bool:
        return bool(given) and hmac.compare_digest(
            (given or "").encode(), self.csrf_token(session).encode())


def token_matches(given: str, token: str) -> bool:
    """Constant time whatever the two lengths share (as the API's bearer check)."""
    return hmac.compare_digest(given.strip().encode(), token.encode())


@dataclass
class LoginThrottle:
    """Wrong tokens per client address: after ``max_failures`` within ``window_s`` that address
    waits until the oldest failure leaves the window. Bounded memory: at most ``max_clients``
    addresses are tracked (the stalest is forgotten first)."""

    max_failures: int = 10
    window_s: float = 300.0
    max_clients: int = 10_000
    _failures: dict[str, deque[float]] = field(default_factory=dict)

    def retry_after_s(self, client: str, *, now_s: float | None = None) -> float:
        """0 when ``client`` may try; else the seconds it has to wait."""
        now_s = time.monotonic() if now_s is None else now_s
        failures = self._failures.get(client)
        if failures is None:
            return 0.0
        while failures and failures[0] <= now_s - self.window_s:
            failures.popleft()
        if not failures:
            del self._failures[client]
            return 0.0
        if len(failures) < self.max_failures:
            return 0.0
        return failures[0] + self.window_s - now_s

    def failed(self, client: str, *, now_s: float | None = None) -> None:
        now_s = time.monotonic() if now_s is None else now_s
        if client not in self._failures and len(self._failures) >= self.max_clients:
            del self._failures[next(iter(self._failures))]
        self._failures.setdefault(client, deque(maxlen=self.max_failures)).append(now_s)

    def succeeded(self, client: str) -> None:
        self._failures.pop(client, None)
