"""A JobQueue's status and conditions, computed from what one reconcile observed: pure.

``handlers.py`` collects an :class:`Observation` per poll and patches the result only when it
differs from the last status written, so an idle queue costs no Kubernetes writes. Nothing here
may change from poll to poll while nothing happens: no timestamps except on transitions, and the
oldest job's age is reported in coarse steps.

Conditions (positive polarity, like Deployments'):

* ``Ready``: the spec is usable, the children are applied, Redis answers and the workers are
  available: False while no worker pod is available (e.g. the seconds a first worker takes to
  start), and False with the pods' own reason (``CrashLoopBackOff``, ``ImagePullBackOff``,
  ``CreateContainerConfigError``, ``Unschedulable``...) while any worker pod fails;
* ``RedisReachable``: the last depth read succeeded;
* ``Scaling``: the autoscaler is deciding (False when disabled, or paused on an error);
* ``RedisConfigured``: maxmemory-policy is ``noeviction`` (False is a warning: jobs may be lost);
* ``ApiAvailable`` (only with ``spec.api.enabled``): an API pod is available, from the API
  Deployment's own status (``Ready`` speaks for the workers only);
* ``ReaperSucceeding``: False while the reaper CronJob's last finished run failed, from the
  CronJob's own status (a run under way leaves the condition as it was).
"""

from __future__ import annotations

import dataclasses
import datetime
from collections.abc import Mapping, Sequence
from typing import Any, Final

TRUE: Final = "True"
FALSE: Final = "False"
UNKNOWN: Final = "Unknown"

#: Waiting reasons of a container that will not start by itself: the kubelet's back-offs and
#: configuration errors (a container merely being created waits with ContainerCreating).
FAILING_WAITING_REASONS: Final = frozenset({
    "CrashLoopBackOff", "ImagePullBackOff", "ErrImagePull", "ErrImageNeverPull",
    "InvalidImageName", "CreateContainerConfigError", "CreateContainerError",
    "RunContainerError", "PreStartHookError", "PostStartHookError",
})
#: Longest pod message quoted in a condition (a termination message may be 4 KiB).
MAX_POD_MESSAGE_CHARS: Final = 240
#: Longest condition message: whatever a message quotes (a Redis server's text, an API
#: server's refusal), the status stays far below the API server's request and object limits.
MAX_CONDITION_MESSAGE_CHARS: Final = 2048


@dataclasses.dataclass(frozen=True)
class Problem:
    """Why the JobQueue cannot be served as written (bad spec, missing Secret, bad URL)."""

    reason: str
    message: str


@dataclasses.dataclass(frozen=True)
class PodTrouble:
    """Why a worker pod does not become available, in its own words."""

    reason: str
    """The kubelet's or the scheduler's reason (``CrashLoopBackOff``, ``Unschedulable``...)."""
    message: str
    """Names the pod; never changes from poll to poll while the trouble lasts."""


@dataclasses.dataclass(frozen=True)
class Workers:
    """The worker Deployment's availability as last observed."""

    available: int
    """Its status.availableReplicas."""
    trouble: PodTrouble | None = None
    """The first failing worker pod (the pods are read only while some are unavailable)."""


@dataclasses.dataclass(frozen=True)
class Api:
    """The API Deployment as last observed (``spec.api.enabled``)."""

    name: str
    wanted: int
    available: int | None
    """Its status.availableReplicas; None while the Deployment is not observed (not applied)."""


@dataclasses.dataclass(frozen=True)
class Reaper:
    """The reaper CronJob as last observed (no run yet while it is not observed)."""

    name: str
    selector: str
    """Label selector of its Jobs, for the message."""
    last_schedule: str | None = None
    """Its status.lastScheduleTime (RFC 3339): when it last started a Job."""
    last_success: str | None = None
    """Its status.lastSuccessfulTime: when a Job of it last completed successfully."""
    running: bool = False
    """Its status.active is not empty: a Job is under way."""


def observed_reaper(cronjob: Mapping[str, Any] | None, *, name: str, selector: str) -> Reaper:
    found = (cronjob or {}).get("status") or {}

    def when(field: str) -> str | None:
        value = found.get(field)
        return value if isinstance(value, str) and value else None

    return Reaper(name=name, selector=selector,
                  last_schedule=when("lastScheduleTime"), last_success=when("lastSuccessfulTime"),
                  running=bool(found.get("active")))


@dataclasses.dataclass(frozen=True)
class QueueNumbers:
    ready: int
    due: int
    scheduled: int
    processing: int
    dead: int
    oldest_ready_age_s: float | None

    @property
    def backlog(self) -> int:
        return self.ready + self.due


@dataclasses.dataclass(frozen=True)
class Observation:
    generation: int | None
    problem: Problem | None = None
    redis_error: str | None = None
    """None when the last Redis round trip succeeded (or none was tried: see ``numbers``)."""
    eviction_warning: str | None = None
    eviction_checked: bool = False
    eviction_unreadable: str | None = None
    """Why maxmemory-policy could not be read (INFO refused), if it could not."""
    numbers: QueueNumbers | None = None
    """The last successful depth read; None before the first one."""
    autoscaling: bool = True
    replicas: int | None = None
    """Worker replicas the operator applied; None when it could not apply any."""
    ready_replicas: int = 0
    desired_replicas: int | None = None
    scaling_note: str | None = None
    """Why the autoscaler holds its hand (at maxReplicas, paused on an error), if it does."""
    selector: str | None = None
    last_scale_time: str | None = None
    workers: Workers | None = None
    """The workers' availability; None when not observed (Ready then ignores it)."""
    api: Api | None = None
    """The API's availability; None when spec.api is not enabled (no ApiAvailable condition)."""
    reaper: Reaper | None = None
    """The reaper's last runs; None when not read (a spec refused): no ReaperSucceeding."""


def available_replicas(deployment: Mapping[str, Any] | None) -> int:
    value = ((deployment or {}).get("status") or {}).get("availableReplicas")
    return value if isinstance(value, int) else 0


def pods_worth_reading(deployment: Mapping[str, Any] | None, *, replicas: int) -> bool:
    """Whether some worker pod is not available, so that its pods may say why; at rest with
    every worker available the operator reads no pod."""
    status = (deployment or {}).get("status") or {}
    unavailable = status.get("unavailableReplicas")
    return replicas > 0 and (available_replicas(deployment) < replicas
                             or (isinstance(unavailable, int) and unavailable > 0))


def _quoted(text: str) -> str:
    """The last non-empty line of a pod's message (its log's tail with FallbackToLogsOnError),
    shortened: what a user needs to see first."""
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    return _shortened(lines[-1] if lines else "", MAX_POD_MESSAGE_CHARS)


def _exit_text(terminated: Mapping[str, Any]) -> str:
    text = f"exited with code {terminated.get('exitCode')}"
    if terminated.get("reason") not in (None, "", "Error"):
        text += f" ({terminated['reason']})"  # OOMKilled says more than "Error"
    quoted = _quoted(str(terminated.get("message") or ""))
    return f"{text}: {quoted}" if quoted else text


def _container_trouble(pod_name: str, container: Mapping[str, Any]) -> PodTrouble | None:
    if container.get("ready"):
        return None
    state = container.get("state") or {}
    waiting = state.get("waiting") or {}
    where = f"pod {pod_name}: container {container.get('name')}"
    if waiting.get("reason") in FAILING_WAITING_REASONS - {"CrashLoopBackOff"}:
        message = _quoted(str(waiting.get("message") or ""))
        return PodTrouble(str(waiting["reason"]), f"{where}: {message}" if message else where)
    # A crashing container is waiting in its back-off, running again or has just exited: one
    # reason for all three, and the exit rather than the back-off's message, which changes
    # with every restart.
    exited = state.get("terminated") or {}
    if not exited.get("exitCode"):
        exited = (container.get("lastState") or {}).get("terminated") or {}
    if exited.get("exitCode"):
        return PodTrouble("CrashLoopBackOff", f"{where} {_exit_text(exited)}")
    if waiting.get("reason") == "CrashLoopBackOff":
        return PodTrouble("CrashLoopBackOff", f"{where} keeps exiting")
    return None


def pod_trouble(pods: Sequence[Mapping[str, Any]]) -> PodTrouble | None:
    """Why worker pods fail, from the first failing one by name (stable across polls); None
    when they are merely starting or all run."""
    for pod in sorted(pods, key=lambda p: str((p.get("metadata") or {}).get("name"))):
        meta, pod_status = pod.get("metadata") or {}, pod.get("status") or {}
        if meta.get("deletionTimestamp") or pod_status.get("phase") in ("Succeeded", "Failed"):
            continue
        name = str(meta.get("name"))
        for condition in pod_status.get("conditions") or []:
            if (condition.get("type"), condition.get("status"),
                    condition.get("reason")) == ("PodScheduled", FALSE, "Unschedulable"):
                message = _quoted(str(condition.get("message") or ""))
                return PodTrouble("Unschedulable", f"pod {name}: {message}")
        for container in [*(pod_status.get("initContainerStatuses") or []),
                          *(pod_status.get("containerStatuses") or [])]:
            trouble = _container_trouble(name, container)
            if trouble is not None:
                return trouble
    return None


def coarse_age_s(age_s: float | None) -> int | None:
    """The oldest job's age in steps of 10 s, 1 min, then 10 min: a waiting job does not turn
    every poll into a status write, while the number stays useful for alerting."""
    if age_s is None:
        return None
    age = int(age_s)
    step = 10 if age < 60 else 60 if age < 3600 else 600
    return age - age % step


def _shortened(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[:limit - 3] + "..."


def _condition(type_: str, status: str, reason: str, message: str) -> dict[str, Any]:
    return {"type": type_, "status": status, "reason": reason,
            "message": _shortened(message, MAX_CONDITION_MESSAGE_CHARS)}


def conditions_for(obs: Observation, previous: Sequence[Mapping[str, Any]] = ()
                   ) -> list[dict[str, Any]]:
    """The conditions without timestamps (``render_status`` adds lastTransitionTime);
    ``previous`` are the conditions last written."""
    if obs.redis_error is not None:
        reachable = _condition("RedisReachable", FALSE, "ConnectionFailed", obs.redis_error)
    elif obs.numbers is not None:
        reachable = _condition("RedisReachable", TRUE, "Connected", "the last depth read succeeded")
    else:
        reachable = _condition("RedisReachable", UNKNOWN, "NotChecked", "Redis was not read yet")

    if obs.eviction_warning is not None:
        configured = _condition("RedisConfigured", FALSE, "EvictionPolicy", obs.eviction_warning)
    elif obs.eviction_unreadable is not None:
        configured = _condition("RedisConfigured", UNKNOWN, "Unreadable",
                                obs.eviction_unreadable)
    elif obs.eviction_checked:
        configured = _condition("RedisConfigured", TRUE, "NoEviction",
                                "maxmemory-policy is noeviction")
    else:
        configured = _condition("RedisConfigured", UNKNOWN, "NotChecked",
                                "the Redis configuration was not checked yet")

    if obs.problem is not None:
        scaling = _condition("Scaling", FALSE, "Paused", f"nothing is scaled: {obs.problem.reason}")
    elif not obs.autoscaling:
        scaling = _condition("Scaling", FALSE, "Disabled",
                             "spec.autoscaling.enabled is false; running spec.replicas workers")
    elif obs.redis_error is not None:
        scaling = _condition("Scaling", FALSE, "Paused",
                             "Redis is unreachable; keeping the current replicas")
    elif obs.scaling_note is not None:
        scaling = _condition("Scaling", TRUE, "Limited", obs.scaling_note)
    else:
        scaling = _condition("Scaling", TRUE, "Active",
                             "replicas follow the backlog")

    if obs.problem is not None:
        ready = _condition("Ready", FALSE, obs.problem.reason, obs.problem.message)
    elif obs.redis_error is not None:
        ready = _condition("Ready", FALSE, "RedisUnreachable", obs.redis_error)
    elif obs.replicas is None:
        ready = _condition("Ready", UNKNOWN, "Reconciling", "the children are not applied yet")
    else:
        ready = _workers_ready(obs.workers, obs.replicas)
    conditions = [ready, reachable, scaling, configured]
    if obs.api is not None:
        conditions.append(_api_available(obs.api))
    if obs.reaper is not None:
        before = next((c for c in previous if isinstance(c, Mapping)
                       and c.get("type") == "ReaperSucceeding"), None)
        conditions.append(_reaper_succeeding(obs.reaper, before))
    return conditions


def _reaper_succeeding(reaper: Reaper, before: Mapping[str, Any] | None) -> dict[str, Any]:
    """From the CronJob's status alone. The CronJob controller removes a finished Job from
    status.active and, for a success, moves lastSuccessfulTime past lastScheduleTime in the
    same status update (syncCronJob in pkg/controller/cronjob/cronjob_controllerv2.go), so a
    run that is not active and left lastSuccessfulTime behind did not succeed. Only a failure
    and the success that ends it change the condition: runs that succeed (the first included)
    and runs under way leave it as it was, so a queue at rest writes nothing."""
    succeeded = reaper.last_success is not None and reaper.last_schedule is not None and (
        _instant(reaper.last_success) >= _instant(reaper.last_schedule))
    still_failing = reaper.running and before is not None and before.get("status") == FALSE
    if (reaper.last_schedule is None or succeeded or reaper.running) and not still_failing:
        return _condition("ReaperSucceeding", TRUE, "NoFailedRun",
                          f"no finished run of CronJob {reaper.name} has failed since its last "
                          f"success")
    return _condition(
        "ReaperSucceeding", FALSE, "LastRunFailed",
        f"the last run of CronJob {reaper.name} did not succeed (last success: "
        f"{reaper.last_success or 'never'}); expired leases wait for a worker's own reaper; "
        f"see kubectl logs -l {reaper.selector}")


def _instant(text: str) -> datetime.datetime:
    try:
        moment = datetime.datetime.fromisoformat(text)
    except ValueError:  # not a time: the API server never writes one, so it counts as long ago
        moment = datetime.datetime.min
    return moment if moment.tzinfo else moment.replace(tzinfo=datetime.UTC)


def _api_available(api: Api) -> dict[str, Any]:
    if api.available is None:
        return _condition("ApiAvailable", UNKNOWN, "NotApplied",
                          f"Deployment {api.name} is not applied yet")
    counted = f"{api.available}/{api.wanted} API pods available"
    if api.available == 0:
        return _condition("ApiAvailable", FALSE, "ApiUnavailable",
                          f"{counted}; see kubectl describe deployment {api.name}")
    return _condition("ApiAvailable", TRUE, "ApiPodsAvailable", counted)


def _workers_ready(workers: Workers | None, replicas: int) -> dict[str, Any]:
    """Ready once the spec, the children and Redis are fine: do the workers run?"""
    if replicas == 0:
        return _condition("Ready", TRUE, "ScaledToZero",
                          "no worker runs: the desired replicas are 0")
    if workers is None:
        return _condition("Ready", TRUE, "WorkersAvailable",
                          "the children are applied and Redis answers")
    counted = f"{workers.available}/{replicas} workers available"
    if workers.trouble is not None:
        return _condition("Ready", FALSE, workers.trouble.reason,
                          f"{counted}; {workers.trouble.message}")
    if workers.available == 0:
        return _condition("Ready", FALSE, "WorkersUnavailable",
                          f"{counted}; waiting for a worker pod to be ready")
    return _condition("Ready", TRUE, "WorkersAvailable",
                      "the children are applied, Redis answers and workers are available")


def _with_transitions(new: Sequence[dict[str, Any]], old: Sequence[Mapping[str, Any]],
                      *, now: str, generation: int | None) -> list[dict[str, Any]]:
    previous = {c.get("type"): c for c in old if isinstance(c, Mapping)}
    result = []
    for condition in new:
        before = previous.get(condition["type"])
        if before is not None and before.get("status") == condition["status"]:
            stamp = before.get("lastTransitionTime", now)
        else:
            stamp = now
        entry = {**condition, "lastTransitionTime": stamp}
        if generation is not None:
            entry["observedGeneration"] = generation
        result.append(entry)
    return result


def render_status(obs: Observation, *, previous: Mapping[str, Any], now: str) -> dict[str, Any]:
    """The full status to write; compare it with ``previous`` before patching."""
    status: dict[str, Any] = {}
    if obs.generation is not None:
        status["observedGeneration"] = obs.generation
    if obs.selector is not None:
        status["selector"] = obs.selector
    if obs.replicas is not None:
        status["replicas"] = obs.replicas
        status["readyReplicas"] = obs.ready_replicas
    if obs.desired_replicas is not None:
        status["desiredReplicas"] = obs.desired_replicas
    if obs.numbers is not None:
        numbers = obs.numbers
        status.update(backlog=numbers.backlog, ready=numbers.ready, due=numbers.due,
                      scheduled=numbers.scheduled, processing=numbers.processing,
                      dead=numbers.dead)
        age = coarse_age_s(numbers.oldest_ready_age_s)
        if age is not None:
            status["oldestJobAgeSeconds"] = age
    last_scale = obs.last_scale_time or previous.get("lastScaleTime")
    if last_scale:
        status["lastScaleTime"] = last_scale
    status["conditions"] = _with_transitions(
        conditions_for(obs, previous.get("conditions") or []), previous.get("conditions") or [],
        now=now, generation=obs.generation)
    return status


def without_times(status: Mapping[str, Any]) -> dict[str, Any]:
    """The status without its conditions' lastTransitionTime: two renderings of the same
    observation compare equal whenever they were made."""
    conditions = [{k: v for k, v in c.items() if k != "lastTransitionTime"}
                  for c in status.get("conditions") or [] if isinstance(c, Mapping)]
    return {**status, "conditions": conditions}


def status_patch(new: Mapping[str, Any], old: Mapping[str, Any]) -> dict[str, Any] | None:
    """A JSON merge patch turning ``old`` into ``new`` (None when they already agree)."""
    patch: dict[str, Any] = {}
    for key, value in new.items():
        if old.get(key) != value:
            patch[key] = value
    for key in old:
        if key not in new:
            patch[key] = None
    return patch or None
