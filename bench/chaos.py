"""The chaos soak: many jobs through real ``antre worker`` processes while, on a seeded schedule,
workers are SIGKILLed (and replaced) about every 2 s, SIGSTOPped past their lease and resumed,
SIGTERMed as a scale-down would (and replaced), Redis (appendonly) is restarted once, and 5% of
the jobs fail transiently and 1% permanently. Then it checks, from Redis and from the traces the
handler leaves (bench/chaos_jobs.py):

- jobs lost: every enqueued job ends done or dead (must be 0);
- dead == the permanent failures, exactly;
- executions per job, and every re-run explained by its history (a lease that expired after a
  kill or a stop, or a release on SIGTERM), never a run without a lease of its own;
- zero duplicated effects for jobs whose handler uses the idempotency key (and, for contrast,
  how many effects were repeated by the jobs without one);
- attempts consistent with the histories, and the queue invariant (tests/invariants.py);
- the wall time.

    python bench/chaos.py                              # 20,000 jobs, 4 workers, ~2 minutes of chaos
    python bench/chaos.py --jobs 3000 --duration 40 --seed 7

Workers run with a 3 s visibility timeout and a 2 s grace period, so a frozen worker loses its
lease within the run; everything else is the worker's defaults. Jobs get max_attempts 10, so
that a job that several kills hit in a row is not dead-lettered for it.
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import random
import signal
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import antre
import antre.jobs
from antre.protocol import scripts
from antre.protocol.read_records import records_op

from bench import _harness as h
from bench import _results

QUEUE = "chaos"
VISIBILITY_S = 3.0
GRACE_S = 2.0
#: Slots per worker (the worker's default concurrency).
CONCURRENCY = 16
MAX_ATTEMPTS = 10
#: How long past its lease a stopped worker stays frozen.
STOP_PAST_LEASE_S = 2.0


@dataclass
class ChaosReport:
    jobs: int
    seed: int
    wall_s: float = 0.0
    finished: bool = False
    lost: list[str] = field(default_factory=list)
    dead: int = 0
    permanent: int = 0
    dead_not_permanent: list[str] = field(default_factory=list)
    permanent_not_dead: list[str] = field(default_factory=list)
    executions: collections.Counter[int] = field(default_factory=collections.Counter)
    reruns: int = 0
    rerun_causes: collections.Counter[str] = field(default_factory=collections.Counter)
    runs_without_lease: list[str] = field(default_factory=list)
    attempts_inconsistent: list[str] = field(default_factory=list)
    histories_truncated: int = 0
    keyed_duplicate_effects: list[str] = field(default_factory=list)
    keyed_missing_effects: list[str] = field(default_factory=list)
    plain_duplicate_effects: int = 0
    invariant_violations: list[str] = field(default_factory=list)
    chaos: collections.Counter[str] = field(default_factory=collections.Counter)

    @property
    def ok(self) -> bool:
        return (self.finished and not self.lost and not self.dead_not_permanent
                and not self.permanent_not_dead and not self.runs_without_lease
                and not self.attempts_inconsistent and not self.keyed_duplicate_effects
                and not self.keyed_missing_effects and not self.invariant_violations)

    def render(self) -> str:
        def some(items: list[str]) -> str:
            return f"{len(items)}" + (f" e.g. {items[:3]}" if items else "")
        hist = ", ".join(f"{n} run(s): {c}" for n, c in sorted(self.executions.items()))
        causes = ", ".join(f"{k}: {v}" for k, v in sorted(self.rerun_causes.items())) or "none"
        chaos = ", ".join(f"{k}: {v}" for k, v in sorted(self.chaos.items()))
        rows = [
            ["jobs", f"{self.jobs:,} (seed {self.seed})"],
            ["chaos applied", chaos],
            ["all settled before the deadline", "yes" if self.finished else "NO"],
            ["jobs lost (must be 0)", some(self.lost)],
            ["dead / permanent failures (must be equal, same ids)",
             f"{self.dead} / {self.permanent}; dead but not permanent {some(self.dead_not_permanent)}; "
             f"permanent but not dead {some(self.permanent_not_dead)}"],
            ["executions per job", hist],
            ["re-runs (beyond one run per claim that ended normally)",
             f"{self.reruns}; their claims ended by: {causes}"],
            ["runs without a lease of their own (must be 0)", some(self.runs_without_lease)],
            ["attempts inconsistent with history (must be 0)", some(self.attempts_inconsistent)
             + (f" ({self.histories_truncated} long histories not checked)" if self.histories_truncated
                else "")],
            ["duplicated effects, handler uses the idempotency key (must be 0)",
             some(self.keyed_duplicate_effects)],
            ["keyed jobs done without their effect (must be 0)", some(self.keyed_missing_effects)],
            ["repeated effects, handler without a key (for contrast)", str(self.plain_duplicate_effects)],
            ["queue invariant violations (must be 0)", some(self.invariant_violations)],
            ["wall time", f"{self.wall_s:.1f} s"],
            ["verdict", "PASS" if self.ok else "FAIL"],
        ]
        return h.table(["check", "result"], rows)


class Fleet:
    """The worker processes and the chaos applied to them."""

    def __init__(self, group: h.Workers, command: list[str], size: int, rng: random.Random,
                 report: ChaosReport) -> None:
        self.group = group
        self.command = command
        self.size = size
        self.rng = rng
        self.report = report
        self.active: list[Any] = []
        self.frozen: dict[int, float] = {}  # pid -> when to SIGCONT

    def fill(self) -> None:
        self.active = [p for p in self.active if p.poll() is None]
        while len(self.active) < self.size:
            self.active.append(self.group.start(self.command))

    def _victim(self) -> Any | None:
        candidates = [p for p in self.active if p.poll() is None and p.pid not in self.frozen]
        return self.rng.choice(candidates) if candidates else None

    def kill(self) -> None:
        if (proc := self._victim()) is not None:
            self.group.signal(proc, signal.SIGKILL)
            self.active.remove(proc)
            self.report.chaos["SIGKILL"] += 1
            self.fill()

    def terminate(self) -> None:
        if (proc := self._victim()) is not None:
            self.group.signal(proc, signal.SIGTERM)
            self.active.remove(proc)  # it drains and exits on its own
            self.report.chaos["SIGTERM"] += 1
            self.fill()

    def freeze(self, for_s: float) -> None:
        if (proc := self._victim()) is not None:
            self.group.signal(proc, signal.SIGSTOP)
            self.frozen[proc.pid] = time.monotonic() + for_s
            self.report.chaos["SIGSTOP past lease"] += 1

    def thaw(self, everything: bool = False) -> None:
        now = time.monotonic()
        for proc in self.group.procs:
            until = self.frozen.get(proc.pid)
            if until is not None and (everything or now >= until):
                self.group.signal(proc, signal.SIGCONT)
                del self.frozen[proc.pid]


def schedule(rng: random.Random, duration_s: float) -> list[tuple[float, str]]:
    events: list[tuple[float, str]] = []
    for name, low, high, first in (("kill", 1.5, 2.5, 1.0), ("freeze", 6.0, 9.0, 3.0),
                                   ("terminate", 8.0, 12.0, 5.0)):
        at = first + rng.uniform(0, low)
        while at < duration_s:
            events.append((at, name))
            at += rng.uniform(low, high)
    events.append((rng.uniform(0.3, 0.6) * duration_s, "restart_redis"))
    return sorted(events)


def enqueue_jobs(queue: antre.Queue, jobs: int, duration_s: float, workers: int,
                 rng: random.Random) -> tuple[list[str], set[str], set[str], set[str]]:
    """Enqueues the jobs; returns (ids, transient ids, permanent ids, keyed ids). Job lengths are
    drawn so the work fills about 70% of the chaos period."""
    mean_ms = max(1.0, 0.7 * workers * CONCURRENCY * duration_s * 1000 / jobs)
    specs, kinds = [], []
    for i in range(jobs):
        draw = rng.random()
        kind = "permanent" if draw < 0.01 else "transient" if draw < 0.06 else "none"
        spec: dict[str, Any] = {
            "type": "chaos", "payload": {"ms": round(rng.uniform(0, 2 * mean_ms), 1), "fail": kind},
            "max_attempts": MAX_ATTEMPTS,
        }
        if i % 2 == 0:
            spec["idempotency_key"] = f"chaos-{i}"
        specs.append(spec)
        kinds.append(kind)
    results = queue.enqueue_many(specs)
    ids = [result.job_id for result in results]
    transient = {ids[i] for i, kind in enumerate(kinds) if kind == "transient"}
    permanent = {ids[i] for i, kind in enumerate(kinds) if kind == "permanent"}
    keyed = {ids[i] for i in range(0, jobs, 2)}
    return ids, transient, permanent, keyed


def histories(r: Any, settings: antre.QueueSettings, ids: list[str]) -> dict[str, dict[str, str]]:
    """Every job's record, finished and dead ones (packed) included."""
    out: dict[str, dict[str, str]] = {}
    for chunk in scripts.chunked(ids):
        out.update(zip(chunk, scripts.run(r, records_op(settings, chunk)), strict=True))
    return out


def analyse(report: ChaosReport, r: Any, settings: antre.QueueSettings, ids: list[str],
            permanent: set[str], keyed: set[str], records: h.Records) -> None:
    records_by_job: dict[str, list[int]] = collections.defaultdict(list)
    with contextlib.suppress(FileNotFoundError):
        for line in (records.dir / "exec").read_text().splitlines():
            job_id, attempt, _pid = line.split()
            records_by_job[job_id].append(int(attempt))
    effects: collections.Counter[tuple[str, str]] = collections.Counter()
    with contextlib.suppress(FileNotFoundError):
        for line in (records.dir / "effect").read_text().splitlines():
            job_id, kind = line.split()
            effects[(job_id, kind)] += 1

    dead_ids = set(r.zrange(settings.keys.dead, 0, -1))
    report.dead, report.permanent = len(dead_ids), len(permanent)
    report.dead_not_permanent = sorted(dead_ids - permanent)
    report.permanent_not_dead = sorted(permanent - dead_ids)
    done_keyed: list[tuple[str, str]] = []
    for job_id, fields in histories(r, settings, ids).items():
        status = fields.get("status")
        if status not in ("done", "dead"):
            report.lost.append(f"{job_id}:{status}")
            continue
        runs = records_by_job.get(job_id, [])
        report.executions[len(runs)] += 1
        events = antre.jobs.read_history(fields)
        if int(fields.get("events", 0)) > len(events):
            report.histories_truncated += 1
            continue
        kinds = collections.Counter(e.event for e in events)
        claims = collections.Counter(e.attempt for e in events if e.event == "claimed")
        # Every run had a claim of its own (same attempt number), never two runs on one claim.
        run_attempts = collections.Counter(runs)
        if any(count > claims.get(attempt, 0) for attempt, count in run_attempts.items()):
            report.runs_without_lease.append(job_id)
        # Every claim ended exactly once, and the attempt counter is claims minus refunds (a
        # release or a hand-back refunds the attempt, unless it came after the lease's deadline).
        ended = (kinds["acked"] + kinds["retrying"] + kinds["dead"] + kinds["lease_expired"]
                 + kinds["released"] + kinds["handed_back"])
        refunds = sum(1 for e in events if e.event in ("released", "handed_back")
                      and "the attempt counts" not in (e.error or ""))
        if (ended != sum(claims.values()) or int(fields.get("attempt", -1))
                != sum(claims.values()) - refunds):
            report.attempts_inconsistent.append(
                f"{job_id} attempt={fields.get('attempt')} history="
                + ",".join(f"{e.event}:{e.attempt}" for e in events))
        normal_ends = kinds["acked"] + kinds["retrying"] + (kinds["dead"] if job_id in permanent else 0)
        extra = len(runs) - normal_ends
        if extra > 0:
            report.reruns += extra
            report.rerun_causes["lease expired (kill, stop or outage)"] += min(extra, kinds["lease_expired"])
            report.rerun_causes["released on SIGTERM"] += max(0, min(extra - kinds["lease_expired"],
                                                                     kinds["released"]))
        if job_id in keyed:
            count = effects[(job_id, "keyed")]
            if count > 1:
                report.keyed_duplicate_effects.append(job_id)
            if status == "done" and fields.get("outcome") == "succeeded":
                done_keyed.append((job_id, fields.get("idempotency_key", "")))
        else:
            report.plain_duplicate_effects += max(effects[(job_id, "plain")] - 1, 0)
    # The effect itself lives in Redis (SET NX); the trace line can be missing when a kill lands
    # between the two, so "missing" is judged from Redis.
    pipe = r.pipeline(transaction=False)
    for _job_id, key in done_keyed:
        pipe.exists(f"chaosfx:{key}")
    report.keyed_missing_effects = [job_id for (job_id, _), present in
                                    zip(done_keyed, pipe.execute(), strict=True) if not present]
    try:
        import invariants  # tests/invariants.py, on sys.path through the harness
        report.invariant_violations = invariants.violations(invariants.snapshot(r, settings))
    except ImportError:
        report.invariant_violations = []


def run_chaos(*, jobs: int = 20_000, workers: int = 4, duration_s: float = 120.0, seed: int = 1,
              settle_timeout_s: float = 240.0, log: Any = print,
              check: Any = None) -> ChaosReport:
    """Runs the soak; ``check(redis_client, queue_settings)``, when given, runs on the settled
    queue before the server is stopped (the tests pass ``assert_invariants``)."""
    rng = random.Random(seed)
    report = ChaosReport(jobs=jobs, seed=seed)
    server = h.start_redis(appendonly=True)
    records = h.Records()
    settings = antre.QueueSettings(name=QUEUE)
    r = h.client(server.url)
    group = h.Workers(h.child_env(server.url, records.dir), records.dir)
    command = [sys.executable, "-m", "antre", "worker", "--handlers", "bench.chaos_jobs",
               "--queue", QUEUE, "--redis-url", server.url, "--visibility-timeout", str(VISIBILITY_S),
               "--grace-period", str(GRACE_S), "--backoff-base", "0.2", "--backoff-max", "2",
               "--log-level", "WARNING"]
    fleet = Fleet(group, command, workers, rng, report)
    try:
        queue = antre.Queue.from_url(server.url, QUEUE)
        started = time.monotonic()
        ids, _transient, permanent, keyed = enqueue_jobs(queue, jobs, duration_s, workers, rng)
        queue.close()
        log(f"enqueued {jobs:,} jobs in {time.monotonic() - started:.1f} s; chaos for {duration_s:.0f} s")
        fleet.fill()
        events = schedule(rng, duration_s)
        chaos_start = time.monotonic()
        while events and time.monotonic() - chaos_start < duration_s:
            fleet.thaw()
            now = time.monotonic() - chaos_start
            while events and events[0][0] <= now:
                _, name = events.pop(0)
                if name == "kill":
                    fleet.kill()
                elif name == "terminate":
                    fleet.terminate()
                elif name == "freeze":
                    fleet.freeze(VISIBILITY_S + STOP_PAST_LEASE_S)
                elif name == "restart_redis":
                    server.restart()
                    report.chaos["Redis restart (appendonly)"] += 1
                    log(f"  {now:5.1f} s: Redis restarted")
            fleet.fill()
            time.sleep(0.05)
        fleet.thaw(everything=True)
        log(f"chaos over after {time.monotonic() - chaos_start:.0f} s: {dict(report.chaos)}; settling")
        deadline = time.monotonic() + settle_timeout_s
        while time.monotonic() < deadline:
            fleet.fill()
            with contextlib.suppress(Exception):
                depth = antre.Queue(r, settings=settings).stats()
                if depth.ready == 0 and depth.processing == 0 and depth.scheduled == 0:
                    report.finished = True
                    break
            time.sleep(0.2)
        report.wall_s = time.monotonic() - started
        group.stop()
        analyse(report, r, settings, ids, permanent, keyed, records)
        if check is not None:
            check(r, settings)
        return report
    finally:
        group.stop()
        r.close()
        server.stop()
        records.cleanup()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--jobs", type=int, default=20_000)
    parser.add_argument("--workers", type=int, default=4)
    parser.add_argument("--duration", type=float, default=120.0, help="seconds of chaos")
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()
    report = run_chaos(jobs=args.jobs, workers=args.workers, duration_s=args.duration, seed=args.seed)
    print()
    print(report.render())
    return 0 if report.ok else 1


if __name__ == "__main__":
    _results.run_and_keep(main, __file__)
