"""Which watch events of a child wake its JobQueue's loop at once (``handlers._child_changed``).

Aspects: the echo of the operator's own apply (while it is in flight, and once it answered)
wakes nothing, so a maxScaleUpStep is never taken twice per poll; a spec change by someone else
(a new generation) and a deletion wake the loop; a status update by the Deployment controller
and a label someone adds do not (the next poll applies if the child is not as the last apply left
it). Every event refreshes the cached view of the child.
"""

from __future__ import annotations

from typing import Any

import pytest
from antre_operator import handlers, kube, reconciling, settings

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
    assert not woken(state, "MODIFIED", deployment(generation=9, rv=20))
    assert state.children[KEY] is not None


def test_a_deleted_object_of_no_jobqueue_served_here_leaves_nothing_in_memory() -> None:
    """Review finding: every labelled Deployment, CronJob or Service ever seen stayed in the
    cache, as a "known to be absent" marker once deleted, so churn grew the operator's memory."""
    state = reconciling.OperatorState(settings=settings.OperatorSettings(metrics_port=None))
    stranger = deployment(generation=1, rv=20, labels={settings.LABEL_JOBQUEUE: "gone"})
    stranger["metadata"]["name"] = "gone-worker"
    key: reconciling.ChildKey = ("Deployment", NS, "gone-worker")
    woken(state, "ADDED", stranger)
    assert key in state.children
    woken(state, "DELETED", stranger)
    assert key not in state.children

    # A JobQueue served here keeps the marker, so its next step needs no read; forgetting the
    # JobQueue drops its children's entries.
    state.spec_changed(NS, "q", {"redis": {}})
    woken(state, "DELETED", deployment(generation=3, rv=21))
    assert state.children[KEY] is None
    state.children[("Service", NS, "q-api")] = None
    state.forget(NS, "q")
    assert state.children == {}
