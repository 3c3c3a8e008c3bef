"""The optional Redis: durable configuration, password handling, the URL Secret.

Aspects: nothing is rendered unless redis.enabled; append-only persistence with fsync every
second and noeviction; the password comes from a generated Secret (with a redis-url key for
JobQueues) or from an existing one (then the chart renders no Secret); the password never sits
in the config or on the command line; a PVC unless persistence is off.
"""

from __future__ import annotations

import base64
from collections.abc import Callable
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest

from .helm_runner import FULLNAME, NAMESPACE, Rendering, render

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



@pytest.mark.parametrize("values", [
    pytest.param({"fullnameOverride": "f" * 63}, id="fullnameOverride"),
    pytest.param({"nameOverride": "n" * 63}, id="nameOverride"),
])
def test_redis_names_fit_kubernetes_for_any_full_name(helm: str, tmp_path: Path,
                                                     values: dict[str, Any]) -> None:
    """The StatefulSet controller labels each pod with the StatefulSet's name, a dash and a
    revision hash, in a label value of at most 63 characters: a StatefulSet name past 52 gets
    no pod at all. Cut at 63 as before, a long full name made such a StatefulSet, and cut the
    headless Service's name down to the client Service's (two Services of one name)."""
    rendering = render(helm, {"redis": {"enabled": True, "architecture": "replication"},
                              **values}, tmp_path)
    (statefulset,) = rendering.of_kind("StatefulSet")
    name = statefulset["metadata"]["name"]
    assert len(name) <= 52 and name.endswith("-redis"), name
    services = [service["metadata"]["name"] for service in rendering.of_kind("Service")]
    assert len(services) == len(set(services)), services
    assert statefulset["spec"]["serviceName"] == f"{name}-headless" in services


def test_redis_names_of_short_full_names_are_unchanged(rendered: Render) -> None:
    """Installs made before the 52-character cut keep their names (a StatefulSet's name, and
    the Secret a JobQueue's urlSecretRef names)."""
    rendering = rendered({"redis": {"enabled": True}, "fullnameOverride": "f" * 46})
    assert rendering.one("StatefulSet")["metadata"]["name"] == "f" * 46 + "-redis"
    assert rendering.one("Secret", "f" * 46 + "-redis") is not None
