"""Which watch events of a child wake its JobQueue's loop at once (``handlers._child_changed``).

Aspects: the echo of the operator's own apply (while it is in flight, and once it answered)
wakes nothing, so a maxScaleUpStep is never taken twice per poll; a spec change by someone else
(a new generation) and a deletion wake the loop; a status update by the Deployment controller
and a label someone adds do not (the next poll applies if the child is not as the last apply left
it). Every event of a child of a JobQueue served here refreshes the cached view of the child, a
small view, not the object; objects labelled as ours that are no such child leave nothing in
memory (anyone who may create a Deployment may label one so).
"""

from __future__ import annotations

import gc
import json
import tracemalloc
from typing import Any

import kopf
import pytest
from antre_operator import handlers, kube, reconciling, rendering, settings

NS = "default"
KEY: reconciling.ChildKey = ("Deployment", NS, "q-worker")


def deployment(*, generation: int, rv: int, replicas: int = 2,
               labels: dict[str, str] | None = None,
               status: dict[str, Any] | None = None) -> dict[str, Any]:
    return {"apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": "q-worker", "namespace": NS, "generation": generation,
                         "resourceVersion": str(rv),
                         "labels": {settings.LABEL_JOBQUEUE: "q", **(labels or {})}},
            "spec": {"replicas": replicas}, "status": status or {}}


def woken(state: reconciling.OperatorState, event_type: str, body: dict[str, Any]) -> bool:
    handlers._child_changed("Deployment", {"type": event_type, "object": body}, body,
                            {"state": state})
    return state.wakeup(NS, "q").is_set()


@pytest.fixture
def state() -> reconciling.OperatorState:
    state = reconciling.OperatorState(settings=settings.OperatorSettings(metrics_port=None))
    applied = deployment(generation=3, rv=10)
    state.applied[KEY] = reconciling.Applied(applied, kube.written_state(applied), 3)
    return state


def test_the_echo_of_an_apply_in_flight_wakes_nothing(state: reconciling.OperatorState) -> None:
    state.applied[KEY] = reconciling.Applied(deployment(generation=3, rv=10), None, None)
    assert not woken(state, "MODIFIED", deployment(generation=4, rv=11, replicas=3))
    assert state.children[KEY]["spec"]["replicas"] == 3  # type: ignore[index]


@pytest.mark.parametrize("event_type, body, wakes", [
    pytest.param("MODIFIED", deployment(generation=3, rv=10), False, id="own-apply-answered"),
    pytest.param("MODIFIED", deployment(generation=3, rv=12, status={"readyReplicas": 2}),
                 False, id="status-by-the-controller"),
    pytest.param("MODIFIED", deployment(generation=3, rv=13, labels={"team": "media"}), False,
                 id="a-label-someone-adds"),
    pytest.param("MODIFIED", deployment(generation=4, rv=14, replicas=7), True,
                 id="kubectl-scale"),
    pytest.param("DELETED", deployment(generation=3, rv=15), True, id="deleted"),
])
def test_which_events_wake_the_loop(state: reconciling.OperatorState, event_type: str,
                                    body: dict[str, Any], wakes: bool) -> None:
    assert woken(state, event_type, body) is wakes


def test_a_child_the_operator_never_applied_wakes_nothing() -> None:
    state = reconciling.OperatorState(settings=settings.OperatorSettings(metrics_port=None))
    state.spec_changed(NS, "q", {"redis": {}})  # served here
    assert not woken(state, "MODIFIED", deployment(generation=9, rv=20))
    assert state.children[KEY] is not None


def padded(name: str, *, jobqueue: str, pad_bytes: int, namespace: str = NS) -> dict[str, Any]:
    """A labelled Deployment of ``pad_bytes`` in an env value and an annotation (replicas 0:
    nothing runs), as anyone who may create a Deployment may make one."""
    return {
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": name, "namespace": namespace, "resourceVersion": "7",
                     "generation": 1, "uid": f"uid-{name}",
                     "annotations": {"pad": "y" * pad_bytes},
                     "labels": {settings.LABEL_MANAGED_BY: settings.MANAGED_BY,
                                settings.LABEL_JOBQUEUE: jobqueue}},
        "spec": {"replicas": 0, "selector": {"matchLabels": {"app": "x"}},
                 "template": {"metadata": {"labels": {"app": "x"}}, "spec": {"containers": [{
                     "name": "c", "image": "busybox",
                     "env": [{"name": "PAD", "value": "x" * pad_bytes}]}]}}},
        "status": {"observedGeneration": 1},
    }


def test_labelled_objects_of_no_jobqueue_served_here_leave_nothing_in_memory() -> None:
    """Review finding: every Deployment labelled as ours was kept whole, served JobQueue or not,
    so 1 MiB ones (replicas 0) in a namespace of their own filled the operator's memory limit;
    and a deleted one stayed as a "known to be absent" marker."""
    state = reconciling.OperatorState(settings=settings.OperatorSettings(metrics_port=None))
    state.spec_changed(NS, "q", {"redis": {}})  # served here, but named by none of them
    count, pad = 8, 1024 * 1024
    gc.collect()
    tracemalloc.start()
    try:
        for i in range(count):
            # Under a child's name (of an unserved JobQueue), or any name; labelled for "q".
            name = f"nothing-{i}-worker" if i % 2 else f"filler-{i}"
            body = padded(name, jobqueue="q" if i % 3 else f"nothing-{i}", pad_bytes=pad,
                          namespace=NS if i % 4 else "tenant-b")
            for event_type in ("ADDED", "MODIFIED"):
                woken(state, event_type, body)
            del body
        gc.collect()
        held, _ = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert state.children == {} and state.gone_at == {}
    assert held < pad, f"{held / 2**20:.1f} MiB held for {count} objects of no JobQueue here"
    assert not state.wakeup(NS, "q").is_set()

    stranger = padded("gone-worker", jobqueue="gone", pad_bytes=10)
    woken(state, "DELETED", stranger)
    assert state.children == {} and state.gone_at == {}


def test_a_child_is_kept_as_a_small_view_of_what_the_steps_read() -> None:
    """A child of a JobQueue served here: its identity, labels and owners, generation,
    spec.replicas, status and the digest of its written state; not its pod template nor its
    annotations, which someone else may make as large as the API server takes."""
    state = reconciling.OperatorState(settings=settings.OperatorSettings(metrics_port=None))
    state.spec_changed(NS, "q", {"redis": {}})
    body = padded("q-worker", jobqueue="q", pad_bytes=1024 * 1024)
    body["spec"]["replicas"] = 3
    woken(state, "ADDED", body)
    view = state.children[KEY]
    assert view is not None
    assert len(json.dumps(view)) < 2048, view
    assert kube.written_state(view) == kube.written_state(body)
    assert kube.ours(view, jobqueue="q", uid="any")  # labelled for q, no controller: adoptable
    assert view["spec"] == {"replicas": 3} and view["status"] == body["status"]
    assert view["metadata"]["uid"] == "uid-q-worker"
    assert view["metadata"]["resourceVersion"] == "7" and view["metadata"]["generation"] == 1
    assert kube.child_view(view) == view


def test_a_strangers_object_under_a_childs_name_is_kept() -> None:
    """An object in the way of a served JobQueue's child, whatever its label names: the step
    reports it as not ours, and sees it go."""
    state = reconciling.OperatorState(settings=settings.OperatorSettings(metrics_port=None))
    state.spec_changed(NS, "q", {"redis": {}})
    stranger = padded("q-worker", jobqueue="other", pad_bytes=10)
    woken(state, "ADDED", stranger)
    assert state.children[KEY] is not None
    woken(state, "DELETED", stranger)
    assert KEY in state.children and state.children[KEY] is None  # known to be absent


def test_forgetting_a_jobqueue_drops_its_children() -> None:
    state = reconciling.OperatorState(settings=settings.OperatorSettings(metrics_port=None))
    state.spec_changed(NS, "q", {"redis": {}})
    woken(state, "DELETED", deployment(generation=3, rv=21))
    assert state.children[KEY] is None  # the next step needs no read
    state.children[("Service", NS, "q-api")] = None
    state.forget(NS, "q")
    assert state.children == {}
    woken(state, "MODIFIED", deployment(generation=3, rv=22))  # a late event
    assert state.children == {}


@pytest.mark.parametrize("kind, name, owner", [
    ("Deployment", "q-worker", "q"), ("Deployment", "q-api", "q"),
    ("Deployment", "a-api-worker", "a-api"), ("CronJob", "q-reaper", "q"),
    ("Service", "q-api", "q"), ("Service", "q-worker", None), ("CronJob", "q-worker", None),
    ("Deployment", "-worker", None), ("Deployment", "worker", None),
    ("Deployment", "q", None),
])
def test_the_jobqueue_of_a_childs_name(kind: str, name: str, owner: str | None) -> None:
    assert rendering.jobqueue_of_child(kind, name) == owner
    if owner is not None:
        assert (kind, name) in rendering.child_names(owner)


def test_children_are_listed_with_our_label_and_in_pages() -> None:
    """The initial list of each child kind, at every start, in pages: in one answer, objects
    anyone labelled as ours (1.5 MiB each at most) were in memory all at once, about three
    times over while decoded (60 of 1 MiB: 316 MiB at start, beyond the chart's 256Mi limit;
    167 MiB in pages of 10, on a real API server)."""
    kopf_settings = kopf.OperatorSettings()
    handlers.configure_kopf(kopf_settings, settings.OperatorSettings(metrics_port=None))
    assert kopf_settings.watching.chunk_size == handlers.LIST_CHUNK_SIZE <= 10
    for group, version, plural in handlers.CHILD_RESOURCES.values():
        resource = kopf.Resource(group, version, plural)
        assert kopf_settings.watching.label_selectors.collect(resource) == [
            f"{settings.LABEL_MANAGED_BY}={settings.MANAGED_BY}"]
