"""The debugging checklist of a queue, as data: what ``antre inspect`` shows, what ``antre doctor``
concludes, what ``antre top`` refreshes.

Pure: :class:`Snapshot` holds what was read from Redis (by :mod:`antre.snapshots`, the only
I/O side), and everything here derives from it: the trend between two depth samples, the
:class:`Finding` list with a suggested action each, the one-screen text rendering and the exit
code. The tests build snapshots by hand for the decisions and read real ones for the I/O.
"""

from __future__ import annotations

import textwrap
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from enum import IntEnum
from typing import Any, Final

from antre.protocol.depth import Depth
from antre.protocol.workers import WorkerEntry
from antre.topology import Topology


@dataclass(frozen=True, slots=True)
class ExpiredLease:
    job_id: str
    job_type: str
    worker: str
    attempt: int
    #: Seconds since the lease deadline passed.
    expired_for_s: float


@dataclass(frozen=True, slots=True)
class OverdueRetry:
    job_id: str
    job_type: str
    attempt: int
    #: Seconds since the job fell due.
    overdue_s: float
    last_error: str


@dataclass(frozen=True, slots=True)
class DeadJob:
    job_id: str
    job_type: str
    last_error: str
    #: When it was dead-lettered (ms, Redis clock); 0 when the record does not say.
    died_at_ms: int


@dataclass(frozen=True, slots=True)
class DeadGroup:
    last_error: str
    count: int
    job_types: tuple[str, ...]
    newest_id: str
    #: Of ``count``, how many died within the burst window before the snapshot.
    recent: int


@dataclass(frozen=True, slots=True)
class ResourceLock:
    resource: str
    job_id: str
    #: Remaining time to live in seconds; None when the key has no TTL (never expires).
    ttl_s: float | None
    #: Whether the holder job is in the processing set (else the lock is orphaned).
    holder_processing: bool


@dataclass(frozen=True, slots=True)
class Snapshot:
    queue: str
    #: Two depth readings some time apart, for the trend; ``after`` is the current state.
    before: Depth
    after: Depth
    expired_leases: Sequence[ExpiredLease] = ()
    #: Retries due more than ``Thresholds.overdue_after_s`` ago (first N), and how many in all.
    overdue_retries: Sequence[OverdueRetry] = ()
    overdue_total: int = 0
    #: The newest dead jobs read (at most the read limit).
    dead_jobs: Sequence[DeadJob] = ()
    locks: Sequence[ResourceLock] = ()
    #: False when the SCAN for locks stopped at its bound (a big keyspace): ``locks`` then holds
    #: every lock of a running job, and those the bounded SCAN found.
    locks_complete: bool = True
    workers: Sequence[WorkerEntry] = ()
    eviction_warning: str | None = None
    #: Ids of worker registry entries that could not be read (bad JSON, wrong field types).
    bad_worker_entries: Sequence[str] = ()
    #: The primary and its replicas; None for a Redis Cluster or when INFO is not allowed.
    topology: Topology | None = None
    #: The queue's ``durable_replicas``: replicas each durable write waits for.
    durable_replicas: int = 0
    #: Jobs queued as fields of the queued Hash (PROTOCOL.md "Queued jobs").
    queued_fields: int = 0
    #: How much longer enqueues write Hashes after a worker of an earlier version was seen, in ms
    #: (None: they do not; -1: no end, a hand-set key).
    hashes_for_ms: int | None = None


@dataclass(frozen=True, slots=True)
class Thresholds:
    overdue_after_s: float = 30.0
    """A due retry not promoted for this long means nothing promotes retries (workers promote
    on every claim and reap every 5 s)."""
    stuck_lease_s: float = 30.0
    """A lease expired for this long was missed by several reaper passes."""
    max_ready_age_s: float = 300.0
    """The next job waiting longer than this is a backlog worth a warning."""
    stale_heartbeat_s: float = 30.0
    """A worker whose last heartbeat is older than this is stalled (heartbeats are <= 5 s)."""
    burst_window_s: float = 300.0
    """Dead-letters within this window before the snapshot count towards a burst."""
    burst_count: int = 10
    """This many dead-letters within the window is a burst."""
    max_replica_lag_s: float = 10.0
    """A replica whose last acknowledgement is older than this has stopped following (replicas
    acknowledge every second)."""


class Severity(IntEnum):
    INFO = 0
    WARNING = 1
    CRITICAL = 2

    def __str__(self) -> str:
        return self.name.lower()


@dataclass(frozen=True, slots=True)
class Finding:
    severity: Severity
    #: Stable identifier, e.g. ``stuck_leases``, for scripts and alert routing.
    code: str
    summary: str
    action: str

    def to_dict(self) -> dict[str, str]:
        return {"severity": str(self.severity), "code": self.code, "summary": self.summary,
                "action": self.action}


@dataclass(frozen=True, slots=True)
class Trend:
    interval_s: float
    ready_delta: int
    backlog_delta: int
    dead_delta: int
    #: Jobs added to the ready list per second (negative: draining); None when no interval.
    ready_rate_per_s: float | None
    #: Jobs finished and failed runs per second, from the counters; None when no interval.
    throughput: Throughput | None = None


#: Counters whose growth is a failed run: retried, or dead-lettered.
FAILED_COUNTERS: Final = ("retried", "dead")


@dataclass(frozen=True, slots=True)
class Throughput:
    done_per_s: float
    #: Runs that failed (retried or dead-lettered) per second.
    failed_per_s: float


def throughput(before: Depth, after: Depth) -> Throughput | None:
    """Rates between two depth samples; None when they are not ordered in time. A counter that
    went down (its stats hash was deleted) counts as no progress, never as a negative rate."""
    interval_s = (after.now_ms - before.now_ms) / 1000
    if interval_s <= 0:
        return None

    def grew(*names: str) -> int:
        return max(sum(after.counters.get(n, 0) for n in names)
                   - sum(before.counters.get(n, 0) for n in names), 0)

    return Throughput(done_per_s=grew("done") / interval_s,
                      failed_per_s=grew(*FAILED_COUNTERS) / interval_s)


def trend(snapshot: Snapshot) -> Trend:
    before, after = snapshot.before, snapshot.after
    interval_s = max(after.now_ms - before.now_ms, 0) / 1000
    ready_delta = after.ready - before.ready
    return Trend(interval_s=interval_s, ready_delta=ready_delta,
                 backlog_delta=after.backlog - before.backlog, dead_delta=after.dead - before.dead,
                 ready_rate_per_s=ready_delta / interval_s if interval_s > 0 else None,
                 throughput=throughput(before, after))


def group_dead(snapshot: Snapshot, thresholds: Thresholds = Thresholds()) -> list[DeadGroup]:
    """Dead jobs grouped by last error, biggest group first (ties: most recent first)."""
    window_start_ms = snapshot.after.now_ms - thresholds.burst_window_s * 1000
    groups: dict[str, list[DeadJob]] = {}
    for job in snapshot.dead_jobs:  # newest first, as read from the dead list
        groups.setdefault(job.last_error, []).append(job)
    result = [
        DeadGroup(last_error=error, count=len(jobs),
                  job_types=tuple(sorted({job.job_type for job in jobs})), newest_id=jobs[0].job_id,
                  recent=sum(1 for job in jobs if job.died_at_ms >= window_start_ms))
        for error, jobs in groups.items()
    ]
    order = {error: i for i, error in enumerate(groups)}
    return sorted(result, key=lambda g: (-g.count, order[g.last_error]))


def _s(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    if seconds < 120:
        return f"{seconds:.1f}s"
    if seconds < 7200:
        return f"{seconds / 60:.1f}m"
    return f"{seconds / 3600:.1f}h"


def diagnose(snapshot: Snapshot, thresholds: Thresholds = Thresholds()) -> list[Finding]:
    """Findings, most severe first; an empty list means nothing looks wrong."""
    after = snapshot.after
    findings: list[Finding] = []
    add = findings.append

    findings.extend(_replication_findings(snapshot, thresholds))

    if snapshot.eviction_warning:
        add(Finding(Severity.CRITICAL, "redis_eviction", snapshot.eviction_warning,
                    "set maxmemory-policy noeviction on this Redis (CONFIG SET or the server's "
                    "config); evicted job records are lost jobs"))

    live_workers = len(snapshot.workers)
    if after.backlog > 0 and live_workers == 0:
        add(Finding(Severity.CRITICAL, "no_workers",
                    f"{after.backlog} job(s) can run now but no worker is registered",
                    "start workers: check the worker Deployment of this JobQueue (replicas, "
                    "pod status, `kubectl logs`) and the operator's autoscaler"))

    findings.extend(_version_findings(snapshot))

    stuck = [lease for lease in snapshot.expired_leases
             if lease.expired_for_s >= thresholds.stuck_lease_s]
    if stuck:
        oldest = max(lease.expired_for_s for lease in stuck)
        add(Finding(Severity.CRITICAL, "stuck_leases",
                    f"{after.expired_leases} lease(s) expired and not requeued, the oldest "
                    f"{_s(oldest)} ago (workers reap every 5 s, so no reaper is running)",
                    "run `antre reaper --once` now; then check that workers are up (they reap "
                    "in-process) and that the reaper CronJob is not suspended or failing"))
    elif after.expired_leases:
        add(Finding(Severity.INFO, "expired_leases",
                    f"{after.expired_leases} lease(s) just expired; the next reaper pass "
                    "requeues them", "none unless it persists (`antre doctor` again in 30 s)"))

    if snapshot.overdue_total:
        oldest = max((r.overdue_s for r in snapshot.overdue_retries), default=0.0)
        add(Finding(Severity.CRITICAL, "overdue_retries",
                    f"{snapshot.overdue_total} retry/delayed job(s) due for more than "
                    f"{_s(thresholds.overdue_after_s)} (oldest {_s(oldest)}): nothing promotes "
                    "them, so the scheduler (worker claims and reaper passes) is not running",
                    "start a worker or run `antre reaper --once` (it promotes due jobs)"))

    groups = group_dead(snapshot, thresholds)
    recent = sum(group.recent for group in groups)
    grew = trend(snapshot).dead_delta
    if recent >= thresholds.burst_count or grew >= thresholds.burst_count:
        top = groups[0] if groups else None
        cause = (f"; top error ({top.count}x): "
                 f"{top.last_error[:120] or '(no error recorded)'}") if top else ""
        add(Finding(Severity.CRITICAL, "dead_letter_burst",
                    f"{max(recent, grew)} job(s) dead-lettered within the last "
                    f"{_s(thresholds.burst_window_s)}{cause}",
                    "look at `antre dlq list` and the handler's logs; fix the cause (a bad "
                    "deploy, a failing dependency), then `antre dlq replay`"))
    elif after.dead:
        top = groups[0] if groups else None
        cause = (f"; top error ({top.count}x): "
                 f"{top.last_error[:120] or '(no error recorded)'}") if top else ""
        add(Finding(Severity.WARNING, "dead_letters", f"{after.dead} dead job(s){cause}",
                    "inspect with `antre dlq list`; replay with `antre dlq replay` once fixed, "
                    "or drop them with `antre dlq purge`"))

    if after.oldest_ready_age_s is not None and after.oldest_ready_age_s > thresholds.max_ready_age_s:
        add(Finding(Severity.WARNING, "old_backlog",
                    f"the next ready job has waited {_s(after.oldest_ready_age_s)} "
                    f"(threshold {_s(thresholds.max_ready_age_s)}); {after.ready} ready",
                    "add workers (raise maxReplicas or concurrency) or find why handlers are "
                    "slow (antre_job_duration_seconds)"))

    change = trend(snapshot)
    if change.backlog_delta > 0 and change.interval_s > 0 and live_workers:
        add(Finding(Severity.INFO, "backlog_growing",
                    f"backlog grew by {change.backlog_delta} in {_s(change.interval_s)}",
                    "none if it is a burst; if it keeps growing, add workers"))

    keepers = {job_id: worker for worker in snapshot.workers for job_id in worker.kept_lock_jobs}
    for lock in snapshot.locks:
        keeper = keepers.get(lock.job_id)
        if lock.ttl_s is None:
            add(Finding(Severity.CRITICAL, "lock_without_ttl",
                        f"resource lock {lock.resource!r} (job {lock.job_id}) has no TTL and "
                        "will block that resource forever",
                        "delete the lock key; antre always sets a TTL, so find what wrote it"))
        elif not lock.holder_processing and keeper is not None:
            add(Finding(Severity.WARNING, "lock_kept_for_thread",
                        f"resource lock {lock.resource!r} is kept for job {lock.job_id}, whose "
                        f"handler still runs (a thread past its timeout, or a handler going on "
                        f"after its job was given back) on worker "
                        f"{keeper.worker_id} (pod {keeper.pod}); it is extended until the "
                        "handler ends",
                        "jobs for that resource wait for that handler: find what it blocks on "
                        "(a thread is also counted in stuck_threads; an async handler is named "
                        "in the worker's log); restarting the pod frees the lock one visibility "
                        "timeout later"))
        elif not lock.holder_processing:
            add(Finding(Severity.WARNING, "orphaned_lock",
                        f"resource lock {lock.resource!r} is held by job {lock.job_id}, which "
                        f"is not processing; it expires in {_s(lock.ttl_s)}",
                        "nothing: jobs for that resource wait until the TTL runs out"))

    for worker in snapshot.workers:
        if worker.stuck_threads:
            all_slots = worker.stuck_threads >= worker.concurrency
            add(Finding(Severity.CRITICAL if all_slots else Severity.WARNING, "stuck_threads",
                        f"worker {worker.worker_id} (pod {worker.pod}): {worker.stuck_threads} "
                        f"of {worker.concurrency} slot(s) held by handler threads past their job "
                        "timeout" + ("; it cannot run anything" if all_slots else ""),
                        "a plain def handler cannot be interrupted: find what it blocks on (a "
                        "call without a timeout), give that call a timeout or use async def; "
                        "restarting the pod frees the slots (those jobs were already failed and "
                        "are retried)"))
        if worker.beat_age_s > thresholds.stale_heartbeat_s:
            add(Finding(Severity.WARNING, "stale_worker",
                        f"worker {worker.worker_id} (pod {worker.pod}) last beat "
                        f"{_s(worker.beat_age_s)} ago",
                        "the process is stalled (blocked event loop, CPU starvation, or "
                        "SIGSTOP): check the pod; its leases expire and are requeued"))

    if snapshot.bad_worker_entries:
        shown = ", ".join(snapshot.bad_worker_entries[:5])
        add(Finding(Severity.WARNING, "bad_worker_entry",
                    f"{len(snapshot.bad_worker_entries)} worker registry entr(y/ies) cannot be "
                    f"read (not antre's JSON): {shown}",
                    "delete those worker keys; a live antre worker rewrites its entry on its next "
                    "heartbeat"))

    return sorted(findings, key=lambda f: -f.severity)


def exit_code(findings: Sequence[Finding], *, fail_on: Severity = Severity.WARNING) -> int:
    """0 when every finding is below ``fail_on``; 1 for warnings, 2 for critical findings."""
    worst = max((f.severity for f in findings), default=Severity.INFO)
    if not findings or worst < fail_on:
        return 0
    return 2 if worst is Severity.CRITICAL else 1


# -- rendering -------------------------------------------------------------------------------------

def _clock(ms: int) -> str:
    return datetime.fromtimestamp(ms / 1000, tz=UTC).strftime("%Y-%m-%d %H:%M:%SZ")


def _cut(text: str, width: int) -> str:
    """One line of at most ``width`` characters (error texts may hold newlines)."""
    text = text.replace("\r", " ").replace("\n", " ").replace("\t", " ")
    return text if len(text) <= width else text[: width - 1] + "~"


def _version_findings(snapshot: Snapshot) -> list[Finding]:
    """Workers of an earlier version claim a job only from its own Hash (PROTOCOL.md
    "Versions"): beside compact queued jobs they lose them; otherwise they only cost memory."""
    earlier = [worker.worker_id for worker in snapshot.workers
               if not worker.claims_queued_fields]
    if not earlier and snapshot.hashes_for_ms is not None:
        left = ("with no end (the key has no expiry)" if snapshot.hashes_for_ms < 0
                else f"for about {max(round(snapshot.hashes_for_ms / 60_000), 1)} more minute(s)")
        return [Finding(Severity.INFO, "earlier_version_seen_recently",
                        "a worker of an earlier version was registered within the last hour: "
                        "enqueues write each job as its own Hash (about 2.5x the memory of a "
                        f"compact one) {left}, in case it froze and comes back",
                        "none: compact jobs return by themselves; once no earlier worker can "
                        f"come back, `DEL <prefix>:{{{snapshot.queue}}}:earlier_workers` ends "
                        "it at once")]
    if not earlier:
        return []
    named = ", ".join(earlier[:3]) + (" ..." if len(earlier) > 3 else "")
    if snapshot.queued_fields:
        return [Finding(Severity.CRITICAL, "queued_jobs_with_earlier_workers",
                        f"{len(earlier)} worker(s) of an earlier version ({named}) serve a queue "
                        f"holding {snapshot.queued_fields} compact queued job(s); such a worker "
                        "drops a compact job when it pops its id",
                        "stop the earlier workers now; to roll back, stop this version's workers, "
                        "run `antre expand-queued --requeue` (it also requeues the jobs already "
                        "dropped), then start the earlier ones")]
    return [Finding(Severity.INFO, "earlier_version_workers",
                    f"{len(earlier)} worker(s) of an earlier version ({named}): enqueues write "
                    "each job as its own Hash (about 2.5x the memory of a compact one) until an "
                    "hour after they leave the registry",
                    "none during a rolling upgrade; if it persists, upgrade those workers")]


def _replication_findings(snapshot: Snapshot, thresholds: Thresholds) -> list[Finding]:
    """Which server is the primary and how its replicas follow; nothing for a single server
    without replicas reached directly (nothing to report)."""
    topology = snapshot.topology
    if topology is None:
        return []
    found = []
    if topology.role != "master":
        found.append(Finding(
            Severity.CRITICAL, "redis_not_primary",
            f"the client is connected to {topology.primary}, a {topology.role}: every write "
            "fails (READONLY)", "point the URL at the primary, or at the Sentinels with "
            "redis+sentinel://host:26379/<service> so a failover is followed"))
    online = topology.online
    if snapshot.durable_replicas > online:
        found.append(Finding(
            Severity.CRITICAL, "durable_writes_blocked",
            f"durable_replicas is {snapshot.durable_replicas} but {online} replica(s) are "
            "online: durable enqueues fail with NotReplicated and workers give their claims back",
            "bring the replicas back (check their pods and the primary's replication link), or "
            "lower ANTRE_DURABLE_REPLICAS for the producers and workers of this queue"))
    lagging = [r for r in topology.replicas
               if r.state != "online" or r.lag_s > thresholds.max_replica_lag_s]
    if lagging:
        found.append(Finding(
            Severity.WARNING, "replica_lag",
            "replica(s) not following the primary: " + "; ".join(
                f"{r.address} {r.state}, last acknowledged {r.lag_s} s ago, {r.behind_bytes} "
                "bytes behind" for r in lagging),
            "a failover now could promote a replica without the latest writes: check the "
            "replicas' logs and the network between them and the primary"))
    if topology.replicas or topology.sentinel_service:
        found.append(Finding(Severity.INFO, "redis_replication", topology.describe(),
                             "none"))
    return found


def render(snapshot: Snapshot, findings: Sequence[Finding] | None = None, *,
           thresholds: Thresholds = Thresholds(), rows: int = 5, width: int = 100) -> str:
    """The one-screen view: each section shows at most ``rows`` lines."""
    after = snapshot.after
    change = trend(snapshot)
    lines = [f"queue {snapshot.queue}   redis time {_clock(after.now_ms)}"]
    if change.interval_s > 0 and change.ready_rate_per_s is not None:
        moving = (f"{change.ready_delta:+d} in {_s(change.interval_s)}, "
                  f"{change.ready_rate_per_s:+.1f}/s")
        if change.throughput is not None:
            moving += (f"; done {change.throughput.done_per_s:.1f}/s, "
                       f"failed {change.throughput.failed_per_s:.1f}/s")
    else:
        moving = "trend: one sample"
    lines.append(f"  ready {after.ready} ({moving})   processing {after.processing}   "
                 f"retry {after.scheduled} (due {after.due})   dead {after.dead}   "
                 f"workers {len(snapshot.workers)}")
    lines.append(_cut(f"  backlog {after.backlog}   oldest ready {_s(after.oldest_ready_age_s)}   "
                      + "  ".join(f"{k}={v}" for k, v in sorted(after.counters.items())),
                      width).rstrip())
    if snapshot.topology is not None:
        lines.extend(textwrap.wrap(f"redis: {snapshot.topology.describe()}", width,
                                   initial_indent="  ", subsequent_indent="    "))

    def section(title: str, count: int, body: list[str]) -> None:
        lines.append(f"{title} ({count})" if count else f"{title}: none")
        lines.extend("  " + _cut(line, width - 2) for line in body[:rows])
        if len(body) > rows:
            lines.append(f"  ... {len(body) - rows} more")

    section("expired leases", after.expired_leases, [
        f"{lease.job_id}  {lease.job_type}  worker={lease.worker or '-'}  "
        f"attempt={lease.attempt}  expired {_s(lease.expired_for_s)} ago"
        for lease in snapshot.expired_leases])
    section(f"overdue retries (due > {_s(thresholds.overdue_after_s)} ago)",
            snapshot.overdue_total, [
                f"{r.job_id}  {r.job_type}  attempt={r.attempt}  overdue {_s(r.overdue_s)}  "
                f"{r.last_error}" for r in snapshot.overdue_retries])
    groups = group_dead(snapshot, thresholds)
    section("dead by last error", after.dead, [
        f"{g.count:>5}  {g.last_error or '(no error recorded)'}  [{', '.join(g.job_types)}]  "
        f"newest {g.newest_id}" for g in groups])
    section("resource locks" if snapshot.locks_complete else
            "resource locks (of running jobs, and a bounded scan of a big keyspace)",
            len(snapshot.locks), [
        f"{lock.resource}  job={lock.job_id}  ttl {_s(lock.ttl_s) if lock.ttl_s is not None else 'none'}"
        f"{'' if lock.holder_processing else '  (holder not processing)'}"
        for lock in snapshot.locks])
    section("workers", len(snapshot.workers), [
        f"{w.worker_id}  pod={w.pod}  jobs {w.in_flight}/{w.concurrency}  "
        f"last beat {_s(w.beat_age_s)} ago  "
        f"up {_s(max(w.read_at_ms - w.started_at_ms, 0) / 1000) if w.started_at_ms else '-'}"
        f"{f'  stuck threads {w.stuck_threads}' if w.stuck_threads else ''}"
        f"{'' if w.claims_queued_fields else '  (earlier version)'}"
        for w in snapshot.workers])
    if snapshot.bad_worker_entries:
        lines.append(_cut("  unreadable registry entries: "
                          + ", ".join(snapshot.bad_worker_entries), width))
    if findings is not None:
        lines.append("findings: none, all clear" if not findings else f"findings ({len(findings)})")
        for finding in findings:
            lines.extend(textwrap.wrap(
                f"{str(finding.severity).upper():<8} {finding.code}: {finding.summary}", width,
                initial_indent="  ", subsequent_indent=" " * 11))
            lines.extend(textwrap.wrap(f"-> {finding.action}", width, initial_indent=" " * 11,
                                       subsequent_indent=" " * 14))
    return "\n".join(lines)


def to_dict(snapshot: Snapshot, findings: Sequence[Finding], *,
            thresholds: Thresholds = Thresholds()) -> dict[str, Any]:
    """The same content for ``--json``."""
    after = snapshot.after
    change = trend(snapshot)
    return {
        "queue": snapshot.queue, "now_ms": after.now_ms,
        "depth": {"ready": after.ready, "processing": after.processing,
                  "expired_leases": after.expired_leases, "retry": after.scheduled,
                  "retry_due": after.due, "dead": after.dead, "backlog": after.backlog,
                  "oldest_ready_age_s": after.oldest_ready_age_s, "counters": after.counters,
                  "queued_fields": snapshot.queued_fields,
                  "hashes_for_ms": snapshot.hashes_for_ms},
        "trend": {"interval_s": change.interval_s, "ready_delta": change.ready_delta,
                  "backlog_delta": change.backlog_delta, "dead_delta": change.dead_delta,
                  "ready_rate_per_s": change.ready_rate_per_s,
                  "done_per_s": change.throughput.done_per_s if change.throughput else None,
                  "failed_per_s": change.throughput.failed_per_s if change.throughput else None},
        "expired_leases": [vars_of(x) for x in snapshot.expired_leases],
        "overdue_retries": {"total": snapshot.overdue_total,
                            "jobs": [vars_of(x) for x in snapshot.overdue_retries]},
        "dead_groups": [vars_of(g) for g in group_dead(snapshot, thresholds)],
        "locks": [vars_of(x) for x in snapshot.locks], "locks_complete": snapshot.locks_complete,
        "workers": [{**vars_of(w), "beat_age_s": w.beat_age_s} for w in snapshot.workers],
        "eviction_warning": snapshot.eviction_warning,
        "bad_worker_entries": list(snapshot.bad_worker_entries),
        "redis": None if snapshot.topology is None else {
            **vars_of(snapshot.topology),
            "replicas": [vars_of(r) for r in snapshot.topology.replicas]},
        "findings": [f.to_dict() for f in findings],
    }


def vars_of(item: Any) -> dict[str, Any]:
    return {name: getattr(item, name) for name in item.__slots__}


__all__ = ["DeadGroup", "DeadJob", "ExpiredLease", "Finding", "OverdueRetry", "ResourceLock",
           "Severity", "Snapshot", "Thresholds", "Trend", "diagnose", "exit_code", "group_dead",
           "render", "to_dict", "trend"]
