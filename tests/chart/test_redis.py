"""The optional Redis: durable configuration, password handling, the URL Secret.

Aspects: nothing is rendered unless redis.enabled; append-only persistence with fsync every
second and noeviction; the password comes from a generated Secret (with a redis-url key for
JobQueues) or from an existing one (then the chart renders no Secret); the password never sits
in the config or on the command line; a PVC unless persistence is off.
"""

from __future__ import annotations

import base64
from collections.abc import Callable
from typing import Any
from urllib.parse import urlsplit

from .helm_runner import FULLNAME, NAMESPACE, Rendering

Render = Callable[[dict[str, Any]], Rendering]
REDIS = f"{FULLNAME}-redis"


def redis_container(rendering: Rendering) -> dict[str, Any]:
    (container,) = rendering.one("StatefulSet", REDIS)["spec"]["template"]["spec"]["containers"]
    return container


def decoded(secret: dict[str, Any], key: str) -> str:
    return base64.b64decode(secret["data"][key]).decode()


def test_off_by_default(rendered: Render) -> None:
    rendering = rendered({})
    assert not [m for m in rendering.manifests
                if m["metadata"]["labels"]["app.kubernetes.io/component"] == "redis"]


def test_configuration_is_durable_and_never_evicts(rendered: Render) -> None:
    conf = rendered({"redis": {"enabled": True, "maxmemory": "2gb"}}).one(
        "ConfigMap", REDIS)["data"]["redis.conf"]
    lines = {line.strip() for line in conf.splitlines()}
    for expected in ("appendonly yes", "appendfsync everysec", "maxmemory-policy noeviction",
                     "dir /data", "maxmemory 2gb"):
        assert expected in lines, expected
    assert "requirepass" not in conf


def test_generated_secret_holds_password_and_url(rendered: Render) -> None:
    rendering = rendered({"redis": {"enabled": True}})
    secret = rendering.one("Secret", REDIS)
    password = decoded(secret, "redis-password")
    assert len(password) == 32 and password.isalnum()
    url = urlsplit(decoded(secret, "redis-url"))
    assert (url.scheme, url.password, url.port, url.path) == ("redis", password, 6379, "/0")
    service = rendering.one("Service", REDIS)
    assert url.hostname == f"{service['metadata']['name']}.{NAMESPACE}.svc"


def test_password_reaches_redis_through_stdin_only(rendered: Render) -> None:
    container = redis_container(rendered({"redis": {"enabled": True}}))
    script = container["command"][-1]
    assert "redis-server /etc/redis/redis.conf -" in script
    assert "requirepass $REDIS_PASSWORD" in script
    env = {e["name"]: e["valueFrom"]["secretKeyRef"] for e in container["env"]}
    assert env["REDIS_PASSWORD"] == {"name": REDIS, "key": "redis-password"}
    assert env["REDISCLI_AUTH"] == env["REDIS_PASSWORD"]


def test_existing_secret(rendered: Render) -> None:
    rendering = rendered({"redis": {"enabled": True, "auth": {
        "existingSecret": "mine", "existingSecretPasswordKey": "pw"}}})
    assert not rendering.of_kind("Secret")
    env = {e["name"]: e["valueFrom"]["secretKeyRef"] for e in redis_container(rendering)["env"]}
    assert env["REDIS_PASSWORD"] == {"name": "mine", "key": "pw"}


def test_persistence(rendered: Render) -> None:
    statefulset = rendered({"redis": {"enabled": True, "persistence": {
        "size": "20Gi", "storageClass": "fast"}}}).one("StatefulSet")
    (claim,) = statefulset["spec"]["volumeClaimTemplates"]
    assert claim["metadata"]["name"] == "data"
    assert claim["spec"]["resources"]["requests"]["storage"] == "20Gi"
    assert claim["spec"]["storageClassName"] == "fast"
    ephemeral = rendered({"redis": {"enabled": True, "persistence": {"enabled": False}}}).one(
        "StatefulSet")
    assert "volumeClaimTemplates" not in ephemeral["spec"]
    volumes = {v["name"]: v for v in ephemeral["spec"]["template"]["spec"]["volumes"]}
    assert "emptyDir" in volumes["data"]


def test_runs_as_the_redis_user_with_a_writable_data_volume(rendered: Render) -> None:
    pod = rendered({"redis": {"enabled": True}}).one("StatefulSet")["spec"]["template"]["spec"]
    assert pod["securityContext"]["runAsUser"] == 999
    assert pod["securityContext"]["fsGroup"] == 999
    mounts = {m["mountPath"] for m in pod["containers"][0]["volumeMounts"]}
    assert {"/data", "/tmp", "/etc/redis"} <= mounts


def test_pinned_redis_7(rendered: Render) -> None:
    image = redis_container(rendered({"redis": {"enabled": True}}))["image"]
    repository, tag = image.rsplit(":", 1)
    assert repository.endswith("/redis")
    assert tag.split(".")[0] == "7" and tag.count(".") == 2, "pin a patch release of Redis 7"
