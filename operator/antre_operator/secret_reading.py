"""The Redis URL a JobQueue names by Secret (spec.redis.urlSecretRef): read, checked, cached.

``reconciling.py`` asks a :class:`SecretReader` for the URL on every step; the Secret is read
through ``kube.py`` at most once per :data:`SECRET_REFRESH_S` (or again at once after a Redis
error, which may mean the Secret was rotated). The URL is checked like one in the spec
(``spec.check_redis_url``) and against the hosts the operator's policy allows. What goes wrong
becomes a :class:`status.Problem` whose message names the Secret and key but never the value (a
URL may hold a password) nor the other keys of the Secret.
"""

from __future__ import annotations

import base64
import binascii
import dataclasses
import time
from typing import Final

from antre_operator import kube, policy, settings, spec, status

#: How long a Redis URL read from a Secret is trusted before it is read again (rotation).
SECRET_REFRESH_S: Final = 300.0


@dataclasses.dataclass(frozen=True)
class _CachedUrl:
    ref: spec.SecretKeyRef
    url: str
    read_at_s: float
    """time.monotonic() of the read."""


class SecretReader:
    """Reads one JobQueue's Redis URL from its Secret, keeping it for SECRET_REFRESH_S."""

    def __init__(self, *, namespace: str, policy: settings.JobQueuePolicy) -> None:
        self.namespace = namespace
        self.policy = policy
        self._cached: _CachedUrl | None = None

    def forget(self) -> None:
        """Read the Secret again on the next call (after a Redis error: it may have rotated)."""
        self._cached = None

    async def redis_url(self, client: kube.KubeClient,
                        redis: spec.RedisSpec) -> tuple[str | None, status.Problem | None]:
        """The URL to read the queue with, or the problem that keeps the operator from it."""
        if redis.url is not None:
            return redis.url, None
        ref = redis.url_secret
        assert ref is not None, "spec.py requires url or urlSecretRef"
        now_s = time.monotonic()
        cached = self._cached
        if cached is not None and cached.ref == ref and now_s - cached.read_at_s < SECRET_REFRESH_S:
            return cached.url, None
        where = f"spec.redis.urlSecretRef: Secret {self.namespace}/{ref.name}"
        try:
            secret = await client.get("Secret", self.namespace, ref.name)
        except kube.KubeError as exc:
            return None, status.Problem("SecretUnreadable", f"{where} cannot be read: {exc}")
        if secret is None:
            return None, status.Problem(
                "SecretNotFound", f"{where} not found; create it with the Redis URL under key "
                                  f"{ref.key!r}")
        encoded = (secret.get("data") or {}).get(ref.key)
        if encoded is None:
            # Never list the keys it has: the status and Events are for whoever may read the
            # JobQueue, not the Secret.
            return None, status.Problem("SecretKeyNotFound", f"{where} has no key {ref.key!r}")
        try:
            url = base64.b64decode(encoded, validate=True).decode().strip()
            spec.check_redis_url(url, field="url", tls=redis.tls)
            policy.check_redis_url(url, self.policy, field="url")
        except (binascii.Error, UnicodeDecodeError):
            return None, status.Problem("InvalidRedisUrl",
                                        f"{where} key {ref.key!r} is not valid base64 text")
        except spec.InvalidSpec as exc:
            # Never echo the value: it may hold a password.
            reason = exc.reason if isinstance(exc, policy.NotAllowed) else "InvalidRedisUrl"
            return None, status.Problem(reason, f"{where} key {ref.key!r}: the URL {exc.allowed}")
        self._cached = _CachedUrl(ref=ref, url=url, read_at_s=now_s)
        return url, None
