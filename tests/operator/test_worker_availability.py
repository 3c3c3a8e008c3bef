"""Ready from the workers' availability (pure: ``status.py``).

Aspects: Ready is False while no worker is available and True once one is, True when scaled to
zero; a failing pod makes it False with the pod's own reason (crash loop, image pull, config
error, unschedulable) and a message naming the pod and the exit; the message of a crash loop is
the same at every stage of a restart (no status write per restart); pods are read only while
some worker is unavailable.
"""

from __future__ import annotations

from typing import Any

import pytest
from antre_operator import status

NUMBERS = status.QueueNumbers(ready=0, due=0, scheduled=0, processing=0, dead=0,
                              oldest_ready_age_s=None)
HANDLERS_ERROR = ("antre worker: handlers module 'myapp.jobs': not importable (No module named "
                  "'myapp'); check --handlers and PYTHONPATH")


def ready(replicas: int, workers: status.Workers | None) -> tuple[str, str, str]:
    obs = status.Observation(generation=1, numbers=NUMBERS, replicas=replicas,
                             desired_replicas=replicas, workers=workers)
    [condition] = [c for c in status.conditions_for(obs) if c["type"] == "Ready"]
    return condition["status"], condition["reason"], condition["message"]


def pod(name: str, *containers: dict[str, Any], **pod_status: Any) -> dict[str, Any]:
    return {"metadata": {"name": name},
            "status": {"phase": "Running", "containerStatuses": list(containers), **pod_status}}


def container(*, ready: bool = False, restarts: int = 0, last: dict[str, Any] | None = None,
              **state: Any) -> dict[str, Any]:
    return {"name": "worker", "ready": ready, "restartCount": restarts, "state": state,
            "lastState": {"terminated": last} if last else {}}


CRASHED = {"exitCode": 2, "reason": "Error", "message": f"some warning\n{HANDLERS_ERROR}\n"}


@pytest.mark.parametrize("replicas, workers, expected", [
    pytest.param(2, status.Workers(available=2), ("True", "WorkersAvailable"), id="all"),
    pytest.param(3, status.Workers(available=1), ("True", "WorkersAvailable"), id="scaling-up"),
    pytest.param(1, status.Workers(available=0), ("False", "WorkersUnavailable"), id="starting"),
    pytest.param(0, status.Workers(available=0), ("True", "ScaledToZero"), id="zero"),
    pytest.param(2, status.Workers(available=1, trouble=status.PodTrouble("CrashLoopBackOff", "x")),
                 ("False", "CrashLoopBackOff"), id="one-crashing"),
])
def test_ready_follows_the_workers(replicas: int, workers: status.Workers,
                                   expected: tuple[str, str]) -> None:
    assert ready(replicas, workers)[:2] == expected


def test_the_message_counts_the_workers_and_quotes_the_pod() -> None:
    trouble = status.PodTrouble("CrashLoopBackOff", "pod w-1: container worker exited with code 2")
    assert ready(3, status.Workers(available=1, trouble=trouble))[2] == (
        "1/3 workers available; pod w-1: container worker exited with code 2")
    assert ready(1, status.Workers(available=0))[2] == (
        "0/1 workers available; waiting for a worker pod to be ready")


@pytest.mark.parametrize("stage", [
    pytest.param(container(restarts=1, last=CRASHED,
                           waiting={"reason": "CrashLoopBackOff",
                                    "message": "back-off 10s restarting failed container"}),
                 id="backing-off"),
    pytest.param(container(restarts=2, last=CRASHED,
                           waiting={"reason": "CrashLoopBackOff",
                                    "message": "back-off 20s restarting failed container"}),
                 id="backing-off-longer"),
    pytest.param(container(restarts=2, last=CRASHED, running={"startedAt": "t"}),
                 id="running-again"),
    pytest.param(container(restarts=2, last={"exitCode": 2},
                           terminated=CRASHED), id="just-exited"),
])
def test_a_crash_loop_reads_the_same_at_every_stage(stage: dict[str, Any]) -> None:
    assert status.pod_trouble([pod("emails-worker-abc", stage)]) == status.PodTrouble(
        "CrashLoopBackOff",
        f"pod emails-worker-abc: container worker exited with code 2: {HANDLERS_ERROR}")


@pytest.mark.parametrize("pods, expected", [
    pytest.param([pod("w", container(waiting={"reason": "ContainerCreating"}))], None,
                 id="creating"),
    pytest.param([pod("w", container(running={}))], None, id="running-not-ready-yet"),
    pytest.param([pod("w", container(ready=True, restarts=3, last=CRASHED, running={}))], None,
                 id="ready-after-restarts"),
    pytest.param([pod("w", container(last={"exitCode": 137, "reason": "OOMKilled"},
                                     restarts=1, waiting={"reason": "CrashLoopBackOff"}))],
                 ("CrashLoopBackOff", "pod w: container worker exited with code 137 (OOMKilled)"),
                 id="oom-killed"),
    pytest.param([pod("w", container(waiting={"reason": "CrashLoopBackOff"}))],
                 ("CrashLoopBackOff", "pod w: container worker keeps exiting"),
                 id="no-last-state"),
    pytest.param([pod("w", container(waiting={
        "reason": "ImagePullBackOff", "message": 'Back-off pulling image "x:1"'}))],
        ("ImagePullBackOff", 'pod w: container worker: Back-off pulling image "x:1"'),
        id="image-pull"),
    pytest.param([pod("w", container(waiting={
        "reason": "CreateContainerConfigError", "message": 'secret "redis-url" not found'}))],
        ("CreateContainerConfigError",
         'pod w: container worker: secret "redis-url" not found'), id="config-error"),
    pytest.param([{"metadata": {"name": "w"}, "status": {"phase": "Pending", "conditions": [
        {"type": "PodScheduled", "status": "False", "reason": "Unschedulable",
         "message": "0/3 nodes are available: 3 Insufficient cpu."}]}}],
        ("Unschedulable", "pod w: 0/3 nodes are available: 3 Insufficient cpu."),
        id="unschedulable"),
    pytest.param([pod("b", container(waiting={"reason": "ErrImagePull"})),
                  pod("a", container(waiting={"reason": "InvalidImageName"}))],
                 ("InvalidImageName", "pod a: container worker"), id="first-by-name"),
    pytest.param([{**pod("w", container(terminated=CRASHED)),
                   "metadata": {"name": "w", "deletionTimestamp": "t"}}], None,
                 id="terminating-ignored"),
    pytest.param([pod("w", container(terminated=CRASHED), phase="Failed")], None,
                 id="failed-pod-ignored"),
])
def test_pod_trouble(pods: list[dict[str, Any]], expected: tuple[str, str] | None) -> None:
    trouble = status.pod_trouble(pods)
    assert (None if trouble is None else (trouble.reason, trouble.message)) == expected


def test_a_long_termination_message_is_shortened() -> None:
    last = {"exitCode": 1, "message": "x" * 4000}
    trouble = status.pod_trouble([pod("w", container(restarts=1, last=last, running={}))])
    assert trouble is not None
    assert trouble.message.endswith("...")
    assert len(trouble.message) < status.MAX_POD_MESSAGE_CHARS + 60


@pytest.mark.parametrize("deployment, replicas, expected", [
    pytest.param({"status": {"availableReplicas": 2, "replicas": 2}}, 2, False, id="at-rest"),
    pytest.param({"status": {"availableReplicas": 1}}, 2, True, id="one-missing"),
    pytest.param({"status": {}}, 1, True, id="none-yet"),
    pytest.param({"status": {"availableReplicas": 2, "unavailableReplicas": 1}}, 2, True,
                 id="a-surge-pod-unavailable"),
    pytest.param({"status": {}}, 0, False, id="scaled-to-zero"),
    pytest.param(None, 1, True, id="not-observed"),
])
def test_pods_are_read_only_while_some_worker_is_unavailable(
        deployment: dict[str, Any] | None, replicas: int, expected: bool) -> None:
    assert status.pods_worth_reading(deployment, replicas=replicas) is expected
