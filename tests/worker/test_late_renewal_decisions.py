"""Which leases a late renewal gives back (antre.held_runs, antre.late_renewals): only runs
abandoned at their deadline while that renewal was on its way, and only when Redis answered
their lease held; never a run that was settling, lost otherwise or re-claimed under a newer
lease; nothing on an outage, nor once the lease that renewal set may have run out. Each
abandoned run gets one outcome."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from antre.held_runs import HeldRuns, held_after_abandon
from antre.jobs import ClaimedJob
from antre.outcomes import Outcomes
from antre.runs import Run
from worker_harness import eventually


def run_of(job_id: str, lease: int = 1) -> Run:
    return Run(ClaimedJob(id=job_id, type="t", payload_json="null", attempt=1, max_attempts=3,
                          lease=lease, idempotency_key=None, resource_key=None,
                          created_at_ms=0, headers_json=""))


def lost_events(caplog: Any) -> list[tuple[str, int]]:
    """The (job id, attempt) of every ``lease_lost`` logged so far."""
    return [(r.job_id, r.attempt) for r in caplog.records
            if r.name == "antre.lifecycle" and getattr(r, "event", None) == "lease_lost"]


def test_only_runs_abandoned_while_the_renewal_was_on_its_way_and_held_go_back() -> None:
    abandoned_held, abandoned_lost, running, settled = (run_of(i) for i in "abcd")
    newer = run_of("a", lease=2)  # the same job under a newer lease: another run
    renewed = [abandoned_held, abandoned_lost, running, settled]
    assert held_after_abandon(renewed, [True, False, True, True],
                              [abandoned_held, abandoned_lost]) == [abandoned_held]
    assert held_after_abandon([newer, running], [True, True], [abandoned_held]) == []
    assert held_after_abandon(renewed, [True] * 4, []) == []


async def held_runs(caplog: Any, *runs: Run) -> tuple[HeldRuns, list[Run], float]:
    """A HeldRuns with a 1 s lease (0.9 s trusted) holding ``runs``, claimed 0.7 s ago (their
    deadline 0.2 s ahead), and a renewal of them sent now: its runs and its send time. Its
    answer, which the test gives, can be trusted for 0.9 s."""
    caplog.set_level(logging.INFO, logger="antre.lifecycle")
    held = HeldRuns(Outcomes("q", "w1", None), lease_s=1.0)
    now = asyncio.get_running_loop().time()
    held.add(runs, claim_sent_at=now - 0.7)
    return held, held.renewing(), now


async def test_a_held_answer_gives_back_the_runs_abandoned_meanwhile(caplog) -> None:
    kept, gone = run_of("kept"), run_of("gone")
    held, renewing, sent_at = await held_runs(caplog, kept, gone)
    late = run_of("late")  # claimed after the renewal left: no renewal of it is on its way
    held.add([late], claim_sent_at=sent_at - 0.7)
    await eventually(lambda: len(held) == 0, timeout_s=5, message="every deadline passed")
    assert kept.lost and gone.lost and late.lost
    # The run no renewal covers is lost at once; the others wait for the answer.
    assert lost_events(caplog) == [("late", 1)]
    assert held.renewal_answered(renewing, [True, False], sent_at=sent_at) == [kept]
    assert lost_events(caplog) == [("late", 1), ("gone", 1)]
    # The answer is spent: a later one gives nothing back, records nothing again.
    assert held.renewal_answered(renewing, [True, True], sent_at=sent_at) == []
    assert len(lost_events(caplog)) == 2


async def test_a_failed_renewal_gives_nothing_back(caplog) -> None:
    run = run_of("j")
    held, renewing, sent_at = await held_runs(caplog, run)
    await eventually(lambda: run.lost, timeout_s=5, message="the deadline")
    assert lost_events(caplog) == []
    assert held.renewal_answered(renewing, None, sent_at=sent_at) == []
    assert lost_events(caplog) == [("j", 1)]


async def test_a_held_answer_past_the_lease_it_set_gives_nothing_back(caplog) -> None:
    """A process frozen or starved past the whole lease: by the answer, Redis may have
    requeued the job already."""
    run = run_of("j")
    held, renewing, sent_at = await held_runs(caplog, run)
    await eventually(lambda: run.lost, timeout_s=5, message="the deadline")
    assert held.renewal_answered(renewing, [True], sent_at=sent_at - held.trusted_s) == []
    assert lost_events(caplog) == [("j", 1)]


async def test_settling_and_reclaimed_runs_are_never_given_back(caplog) -> None:
    settling, reclaimed = run_of("settling"), run_of("again")
    held, renewing, sent_at = await held_runs(caplog, settling, reclaimed)
    settling.settling = True  # its ack is on its way: that reply decides
    newer = run_of("again", lease=2)
    held.add([newer], claim_sent_at=asyncio.get_running_loop().time() + 60)
    assert reclaimed.lost and lost_events(caplog) == [("again", 1)]
    await eventually(lambda: asyncio.get_running_loop().time() > settling.expires_at + 0.05,
                     timeout_s=5, message="the settling run's deadline")
    assert held.renewal_answered(renewing, [True, True], sent_at=sent_at) == []
    assert not settling.lost and not newer.lost and len(held) == 2
    assert lost_events(caplog) == [("again", 1)]
