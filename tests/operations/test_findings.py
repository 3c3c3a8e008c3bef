"""Doctor's decisions on hand-built snapshots (no Redis): each finding appears exactly when its
state is present, with a suggested action, and the exit code follows the worst severity.

Covers: all clear, backlog without workers, stuck vs just-expired leases, overdue retries,
dead-letter burst (recent deaths, or growth between samples) vs old dead letters, old backlog,
orphaned and TTL-less locks, stale workers, eviction policy, trend and dead grouping, rendering.
"""

from __future__ import annotations

import dataclasses

import pytest
from antre import findings
from antre.findings import (
    DeadJob,
    ExpiredLease,
    OverdueRetry,
    ResourceLock,
    Severity,
    Snapshot,
)
from antre.protocol.depth import Depth
from antre.protocol.workers import WorkerEntry

NOW = 1_800_000_000_000


def depth(**fields: object) -> Depth:
    values: dict[str, object] = dict(now_ms=NOW, ready=0, processing=0, expired_leases=0,
                                     scheduled=0, due=0, dead=0, oldest_ready_age_s=None,
                                     workers=1)
    values.update(fields)
    return Depth(**values)  # type: ignore[arg-type]


def worker(beat_age_s: float = 1.0) -> WorkerEntry:
    return WorkerEntry(worker_id="w-1", pod="pod-1", host="h", pid=1, in_flight=0, concurrency=4,
                       last_beat_ms=NOW - int(beat_age_s * 1000), started_at_ms=NOW - 60_000,
                       read_at_ms=NOW)


def snapshot(**fields: object) -> Snapshot:
    after = fields.pop("after", depth())
    values: dict[str, object] = dict(queue="q", before=fields.pop("before", after), after=after,
                                     workers=[worker()])
    values.update(fields)
    return Snapshot(**values)  # type: ignore[arg-type]


def codes(snap: Snapshot) -> dict[str, Severity]:
    return {f.code: f.severity for f in findings.diagnose(snap)}


def test_all_clear() -> None:
    snap = snapshot(after=depth(ready=3, processing=2, oldest_ready_age_s=0.5))
    assert findings.diagnose(snap) == []
    assert findings.exit_code([]) == 0


def test_backlog_without_workers_is_critical() -> None:
    snap = snapshot(after=depth(ready=5, due=2), workers=[])
    assert codes(snap) == {"no_workers": Severity.CRITICAL}
    [finding] = findings.diagnose(snap)
    assert "7 job(s)" in finding.summary and finding.action


def test_empty_queue_without_workers_is_fine() -> None:
    assert codes(snapshot(workers=[])) == {}


@pytest.mark.parametrize(("expired_for_s", "expected"), [
    pytest.param(61.0, {"stuck_leases": Severity.CRITICAL}, id="stuck"),
    pytest.param(2.0, {"expired_leases": Severity.INFO}, id="just-expired"),
])
def test_expired_leases(expired_for_s: float, expected: dict[str, Severity]) -> None:
    lease = ExpiredLease(job_id="j1", job_type="resize", worker="gone", attempt=1,
                         expired_for_s=expired_for_s)
    snap = snapshot(after=depth(processing=1, expired_leases=1), expired_leases=[lease])
    assert codes(snap) == expected


def test_overdue_retries_mean_no_scheduler() -> None:
    retry = OverdueRetry(job_id="j1", job_type="charge", attempt=1, overdue_s=120.0,
                         last_error="TimeoutError")
    snap = snapshot(after=depth(scheduled=1, due=1), overdue_retries=[retry], overdue_total=1)
    assert codes(snap) == {"overdue_retries": Severity.CRITICAL}
    assert "antre reaper --once" in findings.diagnose(snap)[0].action


def dead(n: int, error: str, *, age_s: float) -> list[DeadJob]:
    return [DeadJob(job_id=f"{error}-{i}", job_type="send_email", last_error=error,
                    died_at_ms=NOW - int(age_s * 1000)) for i in range(n)]


def test_dead_letter_burst_by_recent_deaths() -> None:
    jobs = dead(12, "ValueError: bad address", age_s=10) + dead(2, "KeyError: x", age_s=10)
    snap = snapshot(after=depth(dead=14), dead_jobs=jobs)
    [finding] = findings.diagnose(snap)
    assert (finding.code, finding.severity) == ("dead_letter_burst", Severity.CRITICAL)
    assert "14 job(s)" in finding.summary and "(12x): ValueError: bad address" in finding.summary


def test_dead_letter_burst_by_growth_between_samples() -> None:
    snap = snapshot(before=depth(dead=100), after=depth(dead=130, now_ms=NOW + 1000),
                    dead_jobs=dead(30, "E", age_s=3600))
    assert codes(snap) == {"dead_letter_burst": Severity.CRITICAL}


def test_old_dead_letters_are_a_warning() -> None:
    snap = snapshot(after=depth(dead=3), dead_jobs=dead(3, "E", age_s=3600))
    assert codes(snap) == {"dead_letters": Severity.WARNING}
    assert findings.exit_code(findings.diagnose(snap)) == 1
    assert findings.exit_code(findings.diagnose(snap), fail_on=Severity.CRITICAL) == 0


def test_old_backlog_is_a_warning() -> None:
    assert codes(snapshot(after=depth(ready=9, oldest_ready_age_s=900.0))) == {
        "old_backlog": Severity.WARNING}


def test_growing_backlog_is_information() -> None:
    snap = snapshot(before=depth(ready=10), after=depth(ready=40, now_ms=NOW + 2000))
    assert codes(snap) == {"backlog_growing": Severity.INFO}
    assert findings.exit_code(findings.diagnose(snap)) == 0
    change = findings.trend(snap)
    assert (change.ready_delta, change.interval_s, change.ready_rate_per_s) == (30, 2.0, 15.0)


@pytest.mark.parametrize(("lock", "expected"), [
    pytest.param(ResourceLock("acct-1", "j1", 20.0, True), {}, id="held"),
    pytest.param(ResourceLock("acct-1", "j1", 20.0, False), {"orphaned_lock": Severity.WARNING},
                 id="orphaned"),
    pytest.param(ResourceLock("acct-1", "j1", None, True), {"lock_without_ttl": Severity.CRITICAL},
                 id="no-ttl"),
])
def test_locks(lock: ResourceLock, expected: dict[str, Severity]) -> None:
    assert codes(snapshot(locks=[lock])) == expected


def test_a_lock_kept_for_a_running_thread_is_not_called_orphaned() -> None:
    """The lock of a job failed past its timeout stays held while its thread runs; "it expires
    in N s, nothing to do" was wrong there: the heartbeat extends it until the thread returns."""
    keeper = dataclasses.replace(worker(), stuck_threads=1, kept_lock_jobs=("j1",))
    [finding] = findings.diagnose(snapshot(
        locks=[ResourceLock("acct-1", "j1", 20.0, False)], workers=[keeper]))[:1]
    assert finding.code == "lock_kept_for_thread"
    assert "kept for job j1, whose handler still runs (a thread past its timeout, or a " \
        "handler going on after its job was given back) on worker w-1 (pod pod-1)" \
        in finding.summary
    other = dataclasses.replace(keeper, kept_lock_jobs=("j2",))
    assert "orphaned_lock" in codes(snapshot(locks=[ResourceLock("acct-1", "j1", 20.0, False)],
                                             workers=[other]))


def test_stale_worker() -> None:
    assert codes(snapshot(workers=[worker(beat_age_s=90)])) == {"stale_worker": Severity.WARNING}


def test_workers_of_an_earlier_version() -> None:
    """Beside compact queued jobs an earlier worker drops what it pops: critical. Without any,
    it only means enqueues write Hashes for now: information, and during a rolling upgrade the
    normal state."""
    earlier = dataclasses.replace(worker(), worker_id="w-old", claims_queued_fields=False)
    upgrading = snapshot(workers=[worker(), earlier])
    assert codes(upgrading) == {"earlier_version_workers": Severity.INFO}
    losing = dataclasses.replace(upgrading, queued_fields=12)
    [finding] = findings.diagnose(losing)
    assert (finding.severity, finding.code) == (Severity.CRITICAL,
                                                "queued_jobs_with_earlier_workers")
    assert "w-old" in finding.summary and "12 compact queued job(s)" in finding.summary
    assert "antre expand-queued" in finding.action
    # Compact jobs with only this version's workers are the normal state.
    assert codes(snapshot(queued_fields=12)) == {}
    # Gone, it may have frozen and come back: Hashes for the rest of the hour, said once.
    recently = snapshot(hashes_for_ms=25 * 60_000)
    [finding] = findings.diagnose(recently)
    assert (finding.severity, finding.code) == (Severity.INFO, "earlier_version_seen_recently")
    assert "for about 25 more minute(s)" in finding.summary
    assert codes(dataclasses.replace(upgrading, hashes_for_ms=60 * 60_000)) == {
        "earlier_version_workers": Severity.INFO}


def test_eviction_policy() -> None:
    assert codes(snapshot(eviction_warning="maxmemory-policy is allkeys-lru")) == {
        "redis_eviction": Severity.CRITICAL}


def test_findings_are_sorted_most_severe_first() -> None:
    snap = snapshot(after=depth(ready=1, dead=1), dead_jobs=dead(1, "E", age_s=3600), workers=[])
    assert [f.severity for f in findings.diagnose(snap)] == [Severity.CRITICAL, Severity.WARNING]
    assert findings.exit_code(findings.diagnose(snap)) == 2


def test_dead_groups_biggest_first_with_types_and_newest() -> None:
    jobs = dead(1, "B", age_s=1) + dead(3, "A", age_s=1)
    jobs[2] = dataclasses.replace(jobs[2], job_type="charge")
    groups = findings.group_dead(snapshot(dead_jobs=jobs))
    assert [(g.last_error, g.count, g.job_types, g.newest_id) for g in groups] == [
        ("A", 3, ("charge", "send_email"), "A-0"), ("B", 1, ("send_email",), "B-0")]


def test_render_is_one_screen_with_every_section() -> None:
    lease = ExpiredLease(job_id="j1", job_type="resize", worker="gone", attempt=2,
                         expired_for_s=61.0)
    snap = snapshot(after=depth(ready=2, processing=1, expired_leases=1, dead=7),
                    expired_leases=[lease], dead_jobs=dead(7, "ValueError: bad", age_s=3600),
                    locks=[ResourceLock("acct-1", "j1", 12.5, True)])
    text = findings.render(snap, findings.diagnose(snap), rows=3)
    for expected in ("queue q", "ready 2", "expired leases (1)", "j1  resize  worker=gone",
                     "expired 61.0s ago", "overdue retries", "none", "dead by last error (7)",
                     "7  ValueError: bad  [send_email]", "resource locks (1)", "acct-1  job=j1  ttl 12.5s",
                     "workers (1)", "w-1  pod=pod-1", "CRITICAL stuck_leases", "-> run `antre reaper"):
        assert expected in text, expected
    assert len(text.splitlines()) < 40
