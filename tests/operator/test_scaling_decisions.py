"""The autoscaler's decision, with plain numbers: tables, then properties (hypothesis).

Aspects: ceil(backlog/target) clamped to [min, max]; never fewer replicas than hold the jobs in
flight at spec.worker.concurrency each; activation gating 0 -> 1; bounded scale-up
step; scale-down only after the stabilization window; zero only after the cooldown with nothing
processing; a fresh memory never scales down; a step's whole decision (spec.replicas with
autoscaling off, kept replicas while the queue cannot be read, the Scaling condition's notes, a
held scale-down); properties: always within [min, max], monotonic in the backlog, and no flapping
inside the stabilization window.
"""

from __future__ import annotations

import dataclasses

import pytest
from antre_operator import scaling, spec
from hypothesis import given, settings
from hypothesis import strategies as st

POLICY = spec.ScalingPolicy(
    enabled=True, min_replicas=0, max_replicas=10, target_backlog_per_replica=100,
    activation_backlog=0, polling_interval_s=5, scale_down_stabilization_s=60, cooldown_s=300,
    max_scale_up_step=None)
#: Jobs one worker pod runs at once (spec.worker.concurrency's default).
SLOTS = 4


def policy(**changes: object) -> spec.ScalingPolicy:
    return dataclasses.replace(POLICY, **changes)  # type: ignore[arg-type]


def decide(backlog: int, current: int, *, in_flight: int = 0, p: spec.ScalingPolicy = POLICY,
           memory: scaling.ScalerMemory | None = None, now: float = 1000.0,
           slots: int = SLOTS) -> scaling.ScaleDecision:
    if memory is None:  # a memory long past its window, so nothing old holds the decision
        memory = scaling.ScalerMemory(recommendations=((0.0, 0),), last_active_s=0.0)
    return scaling.decide_replicas(backlog=backlog, in_flight=in_flight, current=current,
                                   policy=p, memory=memory, now_s=now, slots_per_replica=slots)


@pytest.mark.parametrize("backlog, current, in_flight, p, expected", [
    pytest.param(540, 2, 0, POLICY, 6, id="ceil-540-per-100"),
    pytest.param(100, 0, 0, POLICY, 1, id="exactly-one-replica"),
    pytest.param(101, 1, 0, POLICY, 2, id="rounds-up"),
    pytest.param(10_000, 2, 0, POLICY, 10, id="clamped-to-max"),
    pytest.param(0, 0, 0, policy(min_replicas=2), 2, id="clamped-to-min"),
    pytest.param(5, 0, 0, policy(activation_backlog=10), 0, id="below-activation-stays-asleep"),
    pytest.param(11, 0, 0, policy(activation_backlog=10), 1, id="above-activation-wakes"),
    pytest.param(0, 0, 3, POLICY, 1, id="in-flight-wakes"),
    pytest.param(900, 1, 0, policy(max_scale_up_step=2), 3, id="bounded-step"),
    pytest.param(0, 3, 0, POLICY, 0, id="idle-past-window-and-cooldown"),
    pytest.param(0, 3, 2, POLICY, 1, id="never-zero-while-processing"),
])
def test_table(backlog: int, current: int, in_flight: int, p: spec.ScalingPolicy,
               expected: int) -> None:
    assert decide(backlog, current, in_flight=in_flight, p=p).replicas == expected


@pytest.mark.parametrize("backlog, current, in_flight, slots, max_replicas, expected", [
    pytest.param(0, 4, 2, 1, 10, 2, id="keeps-as-many-pods-as-jobs-run-one-each"),
    pytest.param(0, 4, 9, 4, 10, 3, id="in-flight-counts-in-slots-per-pod"),
    pytest.param(0, 4, 4, 4, 10, 1, id="consolidates-jobs-spread-thin"),
    pytest.param(150, 1, 9, 4, 10, 3, id="the-larger-of-backlog-and-in-flight"),
    pytest.param(0, 4, 9, 1, 2, 2, id="clamped-to-max"),
])
def test_never_fewer_slots_than_jobs_in_flight(backlog: int, current: int, in_flight: int,
                                               slots: int, max_replicas: int,
                                               expected: int) -> None:
    decision = decide(backlog, current, in_flight=in_flight, slots=slots,
                      p=policy(max_replicas=max_replicas))
    assert decision.replicas == expected


def test_scale_reason_names_the_jobs_in_flight() -> None:
    assert decide(0, 1, in_flight=3, slots=1).reason == (
        "backlog 0, target 100 per replica; 3 jobs in flight at 1 per replica")


def test_scale_event_reason() -> None:
    decision = decide(540, 2)
    assert decision.changed(2)
    assert decision.reason == "backlog 540, target 100 per replica"
    assert decide(0, 3).reason.startswith("idle for the cooldown")
    assert decide(200, 2).reason == "steady"


def test_fresh_memory_waits_a_window_before_scaling_down() -> None:
    first = scaling.decide_replicas(backlog=0, in_flight=0, current=5, policy=POLICY,
                                    memory=scaling.ScalerMemory(), now_s=0.0, slots_per_replica=SLOTS)
    assert first.replicas == 5
    later = scaling.decide_replicas(backlog=0, in_flight=0, current=5, policy=POLICY,
                                    memory=first.memory, now_s=30.0, slots_per_replica=SLOTS)
    assert later.replicas == 5
    after_window = scaling.decide_replicas(backlog=0, in_flight=0, current=5, policy=POLICY,
                                           memory=later.memory, now_s=61.0, slots_per_replica=SLOTS)
    assert after_window.replicas == 1, "down after the window, but not to zero: cooldown"
    after_cooldown = scaling.decide_replicas(backlog=0, in_flight=0, current=1, policy=POLICY,
                                             memory=after_window.memory, now_s=301.0, slots_per_replica=SLOTS)
    assert after_cooldown.replicas == 0


def test_scale_down_waits_for_the_window_after_a_peak() -> None:
    memory = scaling.ScalerMemory()
    replicas = 1
    timeline = [(0, 800), (5, 800), (10, 100), (30, 100), (64, 100), (66, 100)]
    seen = []
    for now, backlog in timeline:
        decision = scaling.decide_replicas(backlog=backlog, in_flight=0, current=replicas,
                                           policy=POLICY, memory=memory, now_s=float(now),
                                           slots_per_replica=SLOTS)
        replicas, memory = decision.replicas, decision.memory
        seen.append(replicas)
    assert seen == [8, 8, 8, 8, 8, 1]


def test_cooldown_counts_from_the_last_work() -> None:
    p = policy(scale_down_stabilization_s=0, cooldown_s=10)
    d = scaling.decide_replicas(backlog=0, in_flight=1, current=1, policy=p,
                                memory=scaling.ScalerMemory(), now_s=0.0, slots_per_replica=SLOTS)
    assert d.replicas == 1
    d = scaling.decide_replicas(backlog=0, in_flight=0, current=1, policy=p, memory=d.memory,
                                now_s=9.0, slots_per_replica=SLOTS)
    assert d.replicas == 1
    d = scaling.decide_replicas(backlog=0, in_flight=0, current=1, policy=p, memory=d.memory,
                                now_s=10.0, slots_per_replica=SLOTS)
    assert d.replicas == 0


# -- a step's whole decision -------------------------------------------------------------------

def jobqueue(**autoscaling: object) -> spec.JobQueueSpec:
    return spec.parse_jobqueue(name="q", namespace="ns", spec={
        "redis": {"url": "redis://redis:6379/0"}, "replicas": 3,
        "autoscaling": {"minReplicas": 1, "maxReplicas": 4, "targetBacklogPerReplica": 100,
                        **autoscaling}})


def decide_workers(jq: spec.JobQueueSpec, *, backlog: int | None, current: int | None,
                   memory: scaling.ScalerMemory | None = None) -> scaling.WorkerDecision:
    if memory is None:
        memory = scaling.ScalerMemory(recommendations=((0.0, 0),), last_active_s=0.0)
    return scaling.decide_workers(jq, backlog=backlog, in_flight=0, current=current,
                                  memory=memory, now_s=1000.0)


def test_autoscaling_off_runs_spec_replicas_and_forgets_the_window() -> None:
    d = decide_workers(jobqueue(enabled=False), backlog=10_000, current=1)
    assert (d.replicas, d.reason, d.note) == (3, "spec.replicas is 3", None)
    assert d.memory == scaling.ScalerMemory()


@pytest.mark.parametrize("current, expected", [
    pytest.param(2, 2, id="keeps-what-runs"),
    pytest.param(None, 1, id="nothing-runs-starts-at-the-floor"),
])
def test_an_unread_queue_pauses_the_autoscaler(current: int | None, expected: int) -> None:
    memory = scaling.ScalerMemory(recommendations=((990.0, 4),), last_active_s=990.0)
    d = decide_workers(jobqueue(), backlog=None, current=current, memory=memory)
    assert (d.replicas, d.note) == (expected, "paused: the queue could not be read")
    assert d.memory == memory


@pytest.mark.parametrize("autoscaling, backlog, replicas, note", [
    pytest.param({}, 250, 3, None, id="within-limits"),
    pytest.param({}, 900, 4, "limited by maxReplicas 4: the backlog would need 9", id="max"),
    pytest.param({"maxScaleUpStep": 1}, 300, 2, "scaling up by at most 1 per poll", id="step"),
])
def test_the_scaling_condition_notes_a_limit_that_bites(
        autoscaling: dict[str, object], backlog: int, replicas: int, note: str | None) -> None:
    d = decide_workers(jobqueue(**autoscaling), backlog=backlog, current=1)
    assert (d.replicas, d.note) == (replicas, note)


def test_a_held_scale_down_keeps_the_current_replicas_and_the_new_memory() -> None:
    d = decide_workers(jobqueue(), backlog=0, current=3)
    assert d.replicas == 1
    held = scaling.hold_scale_down(d, 3)
    assert (held.replicas, held.reason, held.note) == (
        3, "steady", "waiting to learn which pods are idle")
    assert held.memory == d.memory


# -- properties ---------------------------------------------------------------------------------

policies = st.builds(
    spec.ScalingPolicy,
    enabled=st.just(True),
    min_replicas=st.integers(0, 5),
    max_replicas=st.integers(5, 50),
    target_backlog_per_replica=st.integers(1, 500),
    activation_backlog=st.integers(0, 50),
    polling_interval_s=st.just(5),
    scale_down_stabilization_s=st.integers(0, 120),
    cooldown_s=st.integers(0, 600),
    max_scale_up_step=st.one_of(st.none(), st.integers(1, 10)),
)
memories = st.builds(
    scaling.ScalerMemory,
    recommendations=st.lists(st.tuples(st.floats(0, 1000), st.integers(0, 60)), max_size=5)
    .map(lambda xs: tuple(sorted(xs))),
    last_active_s=st.one_of(st.none(), st.floats(0, 1000)),
)


@settings(max_examples=300, deadline=None, database=None)
@given(p=policies, memory=memories, backlog=st.integers(0, 100_000),
       in_flight=st.integers(0, 100), current=st.integers(0, 80))
def test_always_within_bounds(p: spec.ScalingPolicy, memory: scaling.ScalerMemory, backlog: int,
                              in_flight: int, current: int) -> None:
    decision = scaling.decide_replicas(backlog=backlog, in_flight=in_flight, current=current,
                                       policy=p, memory=memory, now_s=1000.0,
                                       slots_per_replica=SLOTS)
    assert p.min_replicas <= decision.replicas <= p.max_replicas
    if decision.replicas < current:  # a scale-down keeps a slot for every job in flight
        assert decision.replicas >= min(-(-in_flight // SLOTS), p.max_replicas)


@settings(max_examples=300, deadline=None, database=None)
@given(p=policies, memory=memories, backlogs=st.tuples(st.integers(0, 20_000),
                                                       st.integers(0, 20_000)),
       in_flight=st.integers(0, 100), current=st.integers(0, 60))
def test_monotonic_in_backlog(p: spec.ScalingPolicy, memory: scaling.ScalerMemory,
                              backlogs: tuple[int, int], in_flight: int, current: int) -> None:
    low, high = sorted(backlogs)
    kwargs = dict(in_flight=in_flight, current=current, policy=p, memory=memory, now_s=1000.0,
                  slots_per_replica=SLOTS)
    assert (scaling.decide_replicas(backlog=low, **kwargs).replicas  # type: ignore[arg-type]
            <= scaling.decide_replicas(backlog=high, **kwargs).replicas)  # type: ignore[arg-type]


@settings(max_examples=200, deadline=None, database=None)
@given(p=policies, steps=st.lists(st.tuples(st.integers(0, 20_000), st.integers(0, 5),
                                            st.floats(0.5, 30)), min_size=2, max_size=40))
def test_no_flapping_inside_the_window(p: spec.ScalingPolicy,
                                       steps: list[tuple[int, int, float]]) -> None:
    """A scale-down only happens when nothing recommended more within the window before it."""
    memory, replicas, now = scaling.ScalerMemory(), p.min_replicas, 0.0
    history: list[tuple[float, int]] = [(now, replicas)]
    for backlog, in_flight, dt in steps:
        now += dt
        decision = scaling.decide_replicas(backlog=backlog, in_flight=in_flight,
                                           current=replicas, policy=p, memory=memory, now_s=now,
                                           slots_per_replica=SLOTS)
        history.append((now, decision.recommended))
        if decision.replicas < replicas:
            recent = [r for t, r in history if now - t < p.scale_down_stabilization_s]
            assert max(recent, default=0) <= decision.replicas
        replicas, memory = decision.replicas, decision.memory
