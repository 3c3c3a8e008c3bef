"""The autoscaler's decision: a pure function of what was measured, the policy and a memory.

Measuring lives in ``backlog.py``; applying in ``kube.py``; this module only does arithmetic, so
it is tested with plain numbers (table cases and hypothesis properties). The rules, as KEDA and
the HPA split them:

* the recommendation is ``ceil(backlog / targetBacklogPerReplica)``, and never fewer replicas
  than hold the jobs in flight (``ceil(in_flight / concurrency)``), clamped to
  ``[minReplicas, maxReplicas]``: a falling backlog removes idle capacity only, and a scale-down
  releases running jobs only when they are spread thinner than ``concurrency`` per pod (or
  maxReplicas is lowered);
* activation: a pool at zero wakes only when the backlog exceeds ``activationBacklog``;
* scale up at once, by at most ``maxScaleUpStep`` replicas per decision;
* scale down to the highest recommendation seen within ``scaleDownStabilizationSeconds`` (so a
  dip does not flap), and never below 1 until the queue has been idle (nothing above the
  activation threshold, nothing processing) for ``cooldownSeconds``.

Memory starts empty; the first decision seeds it with the current replicas, so a restarted
operator waits a full window before scaling anything down.

:func:`decide_workers` is the whole decision a reconcile step takes: spec.replicas when
autoscaling is off, the current replicas while the queue cannot be read (never scale on an
error), else :func:`decide_replicas` with a note for the Scaling condition when a limit bites.
"""

from __future__ import annotations

import dataclasses
import math

from antre_operator import spec, status


@dataclasses.dataclass(frozen=True)
class ScalerMemory:
    """What the decision needs to remember between polls (one per JobQueue)."""

    recommendations: tuple[tuple[float, int], ...] = ()
    """(time_s, recommended replicas) within the stabilization window, oldest first."""

    last_active_s: float | None = None
    """When the queue last had work (backlog above activation, or jobs in flight); None: never."""


@dataclasses.dataclass(frozen=True)
class ScaleDecision:
    replicas: int
    recommended: int
    """The unstabilized recommendation (after activation and clamping)."""
    reason: str
    memory: ScalerMemory

    def changed(self, current: int) -> bool:
        return self.replicas != current


def _clamp(value: int, policy: spec.ScalingPolicy) -> int:
    return max(policy.min_replicas, min(policy.max_replicas, value))


def recommend(backlog: int, in_flight: int, current: int, policy: spec.ScalingPolicy, *,
              slots_per_replica: int) -> int:
    """The raw recommendation before stabilization and cooldown; ``slots_per_replica`` is the
    jobs one worker pod runs at once (spec.worker.concurrency)."""
    active = backlog > policy.activation_backlog or in_flight > 0
    if current == 0 and not active:
        raw = 0  # below the activation threshold a pool at zero stays asleep
    else:
        raw = math.ceil(max(backlog, 0) / policy.target_backlog_per_replica)
        # Never fewer slots than jobs running: a scale-down then only removes idle pods
        # (pod-deletion-cost picks them), instead of releasing work to be run again.
        raw = max(raw, math.ceil(max(in_flight, 0) / max(slots_per_replica, 1)))
    return _clamp(raw, policy)


def decide_replicas(*, backlog: int, in_flight: int, current: int, policy: spec.ScalingPolicy,
                    memory: ScalerMemory, now_s: float, slots_per_replica: int) -> ScaleDecision:
    """How many workers to run now. Pure: the same inputs give the same decision."""
    active = backlog > policy.activation_backlog or in_flight > 0
    last_active_s = memory.last_active_s
    if active:
        last_active_s = now_s
    elif last_active_s is None and current > 0:
        last_active_s = now_s  # unknown history: count the cooldown from the first look
    window = [(t, r) for t, r in memory.recommendations
              if now_s - t < policy.scale_down_stabilization_s]
    if not memory.recommendations:
        window = [(now_s, _clamp(current, policy))]  # a fresh memory never scales down at once
    raw = recommend(backlog, in_flight, current, policy, slots_per_replica=slots_per_replica)
    window.append((now_s, raw))

    if raw > current:
        step = policy.max_scale_up_step
        replicas = raw if step is None else min(raw, current + step)
    elif raw < current:
        replicas = min(current, max(r for _, r in window))
    else:
        replicas = current

    idle_s = math.inf if last_active_s is None else now_s - last_active_s
    if replicas == 0 and current > 0 and idle_s < policy.cooldown_s:
        replicas = 1  # to zero only after the cooldown with nothing processing
    replicas = _clamp(replicas, policy)
    if replicas == current:
        reason = "steady"
    elif replicas == 0:
        reason = f"idle for the cooldown of {policy.cooldown_s:g}s"
    else:
        reason = f"backlog {backlog}, target {policy.target_backlog_per_replica} per replica"
        if math.ceil(max(in_flight, 0) / max(slots_per_replica, 1)) > math.ceil(
                max(backlog, 0) / policy.target_backlog_per_replica):
            reason += f"; {in_flight} jobs in flight at {slots_per_replica} per replica"
    return ScaleDecision(
        replicas=replicas,
        recommended=raw,
        reason=reason,
        memory=ScalerMemory(recommendations=tuple(window), last_active_s=last_active_s),
    )


@dataclasses.dataclass(frozen=True)
class WorkerDecision:
    """The worker replicas one reconcile step applies, and why."""

    replicas: int
    reason: str
    """Why the number, for the Scaled Event."""
    note: str | None
    """Why the autoscaler is limited or paused, for the Scaling condition; None: it is not."""
    memory: ScalerMemory
    """What to remember for the next decision."""


def decide_workers(jq: spec.JobQueueSpec, *, backlog: int | None, in_flight: int,
                   current: int | None, memory: ScalerMemory, now_s: float) -> WorkerDecision:
    """The worker replicas for this step; ``backlog`` None: the queue could not be read;
    ``current`` None: no worker Deployment of ours runs yet."""
    policy = jq.autoscaling
    if not policy.enabled:
        # A fresh memory: turned on again later, autoscaling starts a fresh window.
        return WorkerDecision(jq.replicas, f"spec.replicas is {jq.replicas}", None,
                              ScalerMemory())
    if backlog is None:
        # Never scale on an error: keep what runs (or start at the floor if nothing does).
        keep = current if current is not None else policy.min_replicas
        return WorkerDecision(keep, "steady", "paused: the queue could not be read", memory)
    decision = decide_replicas(backlog=backlog, in_flight=in_flight, current=current or 0,
                               policy=policy, memory=memory, now_s=now_s,
                               slots_per_replica=jq.worker.concurrency)
    note = None
    wanted = math.ceil(backlog / policy.target_backlog_per_replica)
    if wanted > policy.max_replicas:
        note = f"limited by maxReplicas {policy.max_replicas}: the backlog would need {wanted}"
    elif policy.max_scale_up_step is not None and decision.replicas < decision.recommended:
        note = f"scaling up by at most {policy.max_scale_up_step} per poll"
    return WorkerDecision(decision.replicas, decision.reason, note, decision.memory)


def hold_scale_down(decision: WorkerDecision, current: int) -> WorkerDecision:
    """Keep ``current`` while it is unknown which pods are idle: pod-deletion-cost must mark
    them before a scale-down, or the Deployment controller may delete a busy pod first."""
    return dataclasses.replace(decision, replicas=current, reason="steady",
                               note="waiting to learn which pods are idle")


def reaper_at_rest(*, replicas: int, numbers: status.QueueNumbers | None) -> bool:
    """Whether the reaper CronJob may be suspended: no worker is to run and Redis shows nothing
    a reaper could act on (no job queued, due, scheduled or holding a lease, and no dead letter
    to delete after ``dead_ttl_s``, with its idempotency key). Each run of the CronJob is a Job
    and a pod, so a queue at rest would otherwise cost Kubernetes writes every minute. Unread
    (``numbers`` None): keep it running."""
    return replicas == 0 and numbers is not None and not (
        numbers.backlog or numbers.processing or numbers.scheduled or numbers.dead)
