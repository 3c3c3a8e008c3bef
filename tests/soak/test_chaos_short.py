"""The short chaos soak (about 60 s): 3,000 jobs through 4 real ``antre worker`` processes while
workers are SIGKILLed about every 2 s, frozen past their lease, SIGTERMed, and Redis (appendonly)
restarts once; 5% of the jobs fail transiently and 1% permanently.

Aspects asserted: no job lost; dead is exactly the permanent failures; every run had a lease of
its own and every re-run is explained by an expired lease or a release; attempts agree with the
histories; no duplicated effect for handlers that use the idempotency key; the queue invariant.
The long version is ``python bench/chaos.py`` (20,000 jobs).
"""

from __future__ import annotations

import pytest
from invariants import assert_invariants

from bench.chaos import run_chaos

pytestmark = [pytest.mark.soak, pytest.mark.timeout(240)]


@pytest.fixture(scope="module")
def report():  # type: ignore[no-untyped-def]
    return run_chaos(jobs=3_000, workers=4, duration_s=40.0, seed=20_260, settle_timeout_s=120.0,
                     log=lambda _line: None, check=assert_invariants)


def test_everything_settled(report) -> None:  # type: ignore[no-untyped-def]
    assert report.finished, report.render()
    assert report.chaos["SIGKILL"] >= 10
    assert report.chaos["SIGSTOP past lease"] >= 2
    assert report.chaos["SIGTERM"] >= 1
    assert report.chaos["Redis restart (appendonly)"] == 1


def test_no_job_lost(report) -> None:  # type: ignore[no-untyped-def]
    assert report.lost == [], report.render()


def test_dead_is_exactly_the_permanent_failures(report) -> None:  # type: ignore[no-untyped-def]
    assert report.permanent > 0
    assert report.dead == report.permanent
    assert report.dead_not_permanent == [] and report.permanent_not_dead == []


def test_every_run_had_its_own_lease_and_reruns_are_explained(report) -> None:  # type: ignore[no-untyped-def]
    assert report.runs_without_lease == [], report.render()
    assert report.reruns == sum(report.rerun_causes.values()), report.render()


def test_attempts_agree_with_histories(report) -> None:  # type: ignore[no-untyped-def]
    assert report.attempts_inconsistent == [], report.render()


def test_no_duplicated_effect_with_an_idempotency_key(report) -> None:  # type: ignore[no-untyped-def]
    assert report.keyed_duplicate_effects == [], report.render()
    assert report.keyed_missing_effects == [], report.render()


def test_queue_invariant(report) -> None:  # type: ignore[no-untyped-def]
    assert report.invariant_violations == [], report.render()
    assert report.ok, report.render()
