"""The operator (real kopf, emulated API server) under its policy, with hostile JobQueues.

Aspects: with spec.redis.tls, a plain-text URL in the Secret gives InvalidRedisUrl and no child
at all (pods would send the password in clear); a Secret without the key named gives
SecretKeyNotFound without listing the keys it has (its pods wait for the key, as before); a
JobQueue in the operator's own namespace, one whose image or Redis host (in a Secret URL too)
is outside the allow-lists, gets NotAllowed and nothing rendered; an unknown query option in a
Secret's URL is one InvalidRedisUrl naming it (it was a TypeError at every poll). Meanwhile a
good JobQueue is served as usual.
"""

from __future__ import annotations

import base64
from typing import Any

import pytest
from antre_operator.settings import JobQueuePolicy, OperatorSettings
from operator_emulation import condition, create, eventually, jobqueue
from redis_servers import free_port

NS = "team-a"
OPERATOR_NS = "antre-system"


@pytest.fixture
def operator_settings() -> OperatorSettings:
    return OperatorSettings(
        namespaces=(), metrics_port=free_port(), redis_timeout_s=1.0,
        policy=JobQueuePolicy(operator_namespace=OPERATOR_NS,
                              operator_service_account="antre-operator",
                              image_registries=("ghcr.io/antre-dev",),
                              redis_hosts=("127.0.0.1", "*.jobs.svc.cluster.local")))


async def secret(k8s: Any, name: str, **data: str) -> None:
    await create(k8s, {"apiVersion": "v1", "kind": "Secret",
                       "metadata": {"name": name, "namespace": NS},
                       "data": {k: base64.b64encode(v.encode()).decode() for k, v in data.items()}})


def from_secret(name: str, secret_name: str, *, tls: bool = False, **spec: Any) -> dict[str, Any]:
    body = jobqueue(name, NS, "unused", **spec)
    body["spec"]["redis"] = {"urlSecretRef": {"name": secret_name}, "tls": tls}
    return body


def refused(k8s: Any, name: str, namespace: str = NS) -> Any:
    ready = condition(k8s.live("jobqueues", namespace, name), "Ready")
    return ready if ready is not None and ready["status"] == "False" else None


async def test_hostile_jobqueues_get_a_condition_and_nothing_else(
        k8s: Any, operator: Any, redis_url: str) -> None:
    port = redis_url.rsplit(":", 1)[1].split("/")[0]
    await secret(k8s, "plain", url=f"redis://:hunter2@127.0.0.1:{port}/0")
    await secret(k8s, "several", **{"admin-password": "x", "other-token": "y"})
    await secret(k8s, "far", url="redis://:hunter2@10.1.2.3:6379/0")
    await secret(k8s, "optioned", url=f"redis://127.0.0.1:{port}/0?sslmode=require")
    await create(k8s, from_secret("cleartext", "plain", tls=True))
    await create(k8s, from_secret("nokey", "several"))
    await create(k8s, from_secret("far", "far"))
    await create(k8s, from_secret("optioned", "optioned"))
    await create(k8s, jobqueue("foreign", NS, redis_url, worker={"image": "evil.example/x:1"}))
    await create(k8s, jobqueue("inside", OPERATOR_NS, redis_url))
    await create(k8s, jobqueue("good", NS, redis_url))

    await eventually(lambda: (c := condition(k8s.live("jobqueues", NS, "good"), "Ready"))
                     and c["status"] == "True", message="the good JobQueue Ready",
                     timeout_s=30,  # seven JobQueues served at once, on a busy machine
                     describe=lambda: (k8s.live("jobqueues", NS, "good") or {}).get("status"))
    expected = {("cleartext", NS): "InvalidRedisUrl", ("nokey", NS): "SecretKeyNotFound",
                ("far", NS): "NotAllowed", ("optioned", NS): "InvalidRedisUrl",
                ("foreign", NS): "NotAllowed", ("inside", OPERATOR_NS): "NotAllowed"}
    for (name, namespace), reason in expected.items():
        ready = await eventually(lambda n=name, ns=namespace: refused(k8s, n, ns),
                                 message=f"{name} refused")
        assert ready["reason"] == reason, (name, ready)
        assert "hunter2" not in ready["message"]
        if reason == "SecretKeyNotFound":
            continue  # the pods wait for the key, as for a missing Secret
        for kind, child in (("deployments", f"{name}-worker"), ("cronjobs", f"{name}-reaper")):
            assert k8s.live(kind, namespace, child) is None, f"{kind} {child} rendered"

    messages = {name: refused(k8s, name, ns)["message"] for name, ns in expected}
    assert "rediss://" in messages["cleartext"]
    assert messages["nokey"] == ("spec.redis.urlSecretRef: Secret team-a/several has no key "
                                 "'url'")
    assert "admin-password" not in str(k8s.live("jobqueues", NS, "nokey"))
    assert "'10.1.2.3'" in messages["far"] and "127.0.0.1" in messages["far"]
    assert "unknown query option 'sslmode'" in messages["optioned"]
    assert messages["foreign"].startswith("spec.worker.image: got 'evil.example/x:1'")
    assert messages["inside"].startswith("metadata.namespace: got 'antre-system'")
    assert k8s.live("deployments", NS, "good-worker") is not None


async def test_a_secret_sentinel_url_with_a_superscript_port_is_a_condition(
        k8s: Any, operator: Any, redis_url: str) -> None:
    """'²' passes str.isdigit but not int(): the Secret's URL is one InvalidRedisUrl naming what
    a port may be, not a ValueError traceback at every poll with the status left unwritten."""
    await secret(k8s, "superscript", url="redis+sentinel://:hunter2@127.0.0.1:²/mymaster/0")
    await create(k8s, from_secret("superscript", "superscript"))
    ready = await eventually(lambda: refused(k8s, "superscript"), message="superscript refused",
                             describe=lambda: (k8s.live("jobqueues", NS, "superscript") or {})
                             .get("status"))
    assert ready["reason"] == "InvalidRedisUrl"
    assert "the port must be a number from 1 to 65535" in ready["message"]
    assert "hunter2" not in ready["message"]
    assert k8s.live("deployments", NS, "superscript-worker") is None
