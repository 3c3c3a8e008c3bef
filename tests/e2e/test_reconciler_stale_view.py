"""The operator's reconciler, in process, on a real API server, with a view of a child that a
watch has not brought up to date yet.

Aspects: a child the spec no longer wants (here the API Deployment, the spec has no ``api``) is
deleted by the uid the operator saw. When the name holds a stranger's object by then (ours was
deleted and someone made their own of that name, and the watch event is still on its way), the
API server's uid precondition (a 409) spares it: the operator deletes nothing, and the next step
reads the name again and reports the stranger's object as not ours. A child the spec wants is
applied naming the uid seen, so the same late view never takes the stranger's object over.
"""

from __future__ import annotations

import asyncio
import copy
from collections.abc import Callable
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


def stranger_cronjob(name: str) -> dict[str, Any]:
    return {
        "apiVersion": "batch/v1", "kind": "CronJob", "metadata": {"name": name},
        "spec": {"schedule": "0 0 1 1 *", "suspend": True, "jobTemplate": {"spec": {"template": {
            "spec": {"restartPolicy": "Never",
                     "containers": [{"name": "c", "image": "busybox"}]}}}}},
    }


def real_client(cluster: Cluster) -> kube.KubeClient:
    configuration = kubernetes.client.Configuration()
    kubernetes.config.load_kube_config(  # type: ignore[no-untyped-call]
        config_file=str(cluster.kubeconfig), client_configuration=configuration)
    return kube.KubeClient(timeout_s=30, configuration=configuration)


#: What the test checks between the two steps: the state, and the Events so far.
Between = Callable[[reconciling.OperatorState, list[dict[str, Any]]], None]


def two_steps_with_a_late_view(cluster: Cluster, namespace: str, monkeypatch: pytest.MonkeyPatch,
                               stranger: dict[str, Any], between: Between,
                               ) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """Makes JobQueue ``jq`` (its Redis unreachable) and the ``stranger`` object under the name
    of one of its children, then runs two reconcile steps whose view of that child is what a
    late watch still shows: the operator's own child, orphaned (adoptable), under that name,
    with the uid ours had. Returns the stranger's object as made, and the Events."""
    cluster.apply(jobqueue("jq", redis={"url": "redis://127.0.0.1:1/0"}), namespace=namespace)
    body = cluster.get("jobqueue", "jq", namespace)
    assert body is not None
    cluster.apply(stranger, namespace=namespace)
    kind, name = stranger["kind"], stranger["metadata"]["name"]
    theirs = cluster.get(kind.lower(), name, namespace)
    assert theirs is not None
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
            state.remember_child((kind, namespace, name), ours)
            await rec.step(body)
            between(state, events)
            await rec.step(body)  # reads the name again: a stranger's object, left alone
        finally:
            await rec.close()
            await state.kube.close()

    asyncio.run(two_steps())
    return theirs, events


def test_a_stale_view_never_deletes_a_strangers_object(cluster: Cluster, crds: None,
                                                       namespace: str,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    def between(_state: reconciling.OperatorState, events: list[dict[str, Any]]) -> None:
        assert not [e for e in events if e["reason"] == "NotOurs"], events

    theirs, events = two_steps_with_a_late_view(cluster, namespace, monkeypatch,
                                                stranger_deployment("jq-api"), between)
    live = cluster.get("deployment", "jq-api", namespace)
    assert live is not None and live["metadata"]["uid"] == theirs["metadata"]["uid"], (
        "the operator deleted a stranger's Deployment it took for its own")
    assert "deletionTimestamp" not in live["metadata"]
    [not_ours] = [e for e in events if e["reason"] == "NotOurs"]
    assert not_ours["message"] == "Deployment jq-api is not ours; not deleting it"


def test_a_stale_view_never_takes_over_a_strangers_object(cluster: Cluster, crds: None,
                                                          namespace: str,
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    """The same late view, of a child the spec wants (the reaper CronJob): the apply it makes
    names the uid seen, so the API server refuses it (422) rather than the stranger's object
    being taken over (our labels, our owner, our spec); the next step reads the name again."""
    def between(state: reconciling.OperatorState, _events: list[dict[str, Any]]) -> None:
        assert ("CronJob", namespace, "jq-reaper") not in state.children, "read again next"

    theirs, events = two_steps_with_a_late_view(cluster, namespace, monkeypatch,
                                                stranger_cronjob("jq-reaper"), between)
    live = cluster.get("cronjob", "jq-reaper", namespace)
    assert live is not None and live["metadata"]["uid"] == theirs["metadata"]["uid"]
    assert live["metadata"].get("labels") == theirs["metadata"].get("labels"), (
        "the operator applied its reaper CronJob onto a stranger's it took for its own")
    assert not live["metadata"].get("ownerReferences")
    assert live["spec"] == theirs["spec"]
    applies = [e["message"] for e in events if e["reason"] == "ApplyFailed"]
    assert applies and "metadata.uid" in applies[0], events
