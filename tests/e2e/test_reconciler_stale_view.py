"""The operator's reconciler, in process, on a real API server, with a view of a child that a
watch has not brought up to date yet.

Aspect: a child the spec no longer wants (here the API Deployment, the spec has no ``api``) is
deleted by the uid the operator saw. When the name holds a stranger's object by then (ours was
deleted and someone made their own of that name, and the watch event is still on its way), the
API server's uid precondition (a 409) spares it: the operator deletes nothing, and the next step
reads the name again and reports the stranger's object as not ours.
"""

from __future__ import annotations

import asyncio
import copy
from typing import Any

import kopf
import kubernetes
import pytest
from antre_operator import kube, reconciling, settings

from .cluster import Cluster
from .samples import jobqueue


def stranger_deployment(name: str) -> dict[str, Any]:
    labels = {"app": "theirs"}
    return {
        "apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": name},
        "spec": {"replicas": 0, "selector": {"matchLabels": labels},
                 "template": {"metadata": {"labels": labels},
                              "spec": {"containers": [{"name": "c", "image": "busybox"}]}}},
    }


def real_client(cluster: Cluster) -> kube.KubeClient:
    configuration = kubernetes.client.Configuration()
    kubernetes.config.load_kube_config(  # type: ignore[no-untyped-call]
        config_file=str(cluster.kubeconfig), client_configuration=configuration)
    return kube.KubeClient(timeout_s=30, configuration=configuration)


def test_a_stale_view_never_deletes_a_strangers_object(cluster: Cluster, crds: None,
                                                       namespace: str,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    cluster.apply(jobqueue("jq", redis={"url": "redis://127.0.0.1:1/0"}), namespace=namespace)
    body = cluster.get("jobqueue", "jq", namespace)
    assert body is not None
    cluster.apply(stranger_deployment("jq-api"), namespace=namespace)
    theirs = cluster.get("deployment", "jq-api", namespace)
    assert theirs is not None
    # What a late watch still shows: the operator's own API Deployment, orphaned (adoptable),
    # under the name the stranger's object now holds; its uid is the one ours had.
    ours = copy.deepcopy(theirs)
    ours["metadata"].update(uid="00000000-0000-0000-0000-00000000a11e", labels={
        settings.LABEL_MANAGED_BY: settings.MANAGED_BY, settings.LABEL_JOBQUEUE: "jq"})
    assert kube.ours(ours, jobqueue="jq", uid=body["metadata"]["uid"])

    events: list[dict[str, Any]] = []
    monkeypatch.setattr(kopf, "event", lambda _body, **kw: events.append(kw))

    async def two_steps() -> None:
        state = reconciling.OperatorState(
            settings=settings.OperatorSettings(metrics_port=None, redis_timeout_s=1.0))
        state.kube = real_client(cluster)
        rec = reconciling.Reconciler(state, namespace=namespace, name="jq")
        try:
            state.remember_child(("Deployment", namespace, "jq-api"), ours)
            await rec.step(body)
            assert not [e for e in events if e["reason"] == "NotOurs"], events
            await rec.step(body)  # reads the name again: a stranger's object, left alone
        finally:
            await rec.close()
            await state.kube.close()

    asyncio.run(two_steps())
    live = cluster.get("deployment", "jq-api", namespace)
    assert live is not None and live["metadata"]["uid"] == theirs["metadata"]["uid"], (
        "the operator deleted a stranger's Deployment it took for its own")
    assert "deletionTimestamp" not in live["metadata"]
    [not_ours] = [e for e in events if e["reason"] == "NotOurs"]
    assert not_ours["message"] == "Deployment jq-api is not ours; not deleting it"
