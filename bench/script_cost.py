"""What one script call costs Redis, in machine instructions: redis-server runs under valgrind's
callgrind, and each step a job goes through (enqueue one job, claim it, renew its lease, ack it)
is called ``--calls`` times, one job per call, as a producer and a worker send them. Each step is
measured twice in one server: with each script loaded as antre loads it (the part of
``_prelude.lua`` it uses, antre/protocol/prelude.py) and with the whole prelude before it, as
every script was loaded before; an empty script (``return 1``) gives the floor of any call.

``--drain N`` adds what Redis spends per job while a real ``antre worker`` (its defaults, the
bench's no-op handler) drains N queued jobs, claims and acks batched as a backlog batches them:
once with the jobs queued as fields (a worker of this version was registered while they were
enqueued) and once as Hashes (none was: a queue scaled to zero). From the worker's start to its
last ack, so its registration and heartbeats are in it too.

The count covers everything Redis does for the call (reading and parsing the command, the
script, the reply), hardly moves with the machine's load, and is the same for the same binary
and inputs, where Redis's own ``usec_per_call`` on a shared 2-core machine varies by 2x between
runs. It reports; it asserts nothing.

    python bench/script_cost.py                 # 400 calls per step and variant
    python bench/script_cost.py --calls 1000
    python bench/script_cost.py --drain 10000   # and a worker's drain of 10,000 jobs
"""

from __future__ import annotations

import argparse
import dataclasses
import hashlib
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from importlib import resources
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import antre
import redis
from antre.protocol import scripts
from antre.protocol.ack import ack_op
from antre.protocol.claim import claim_op
from antre.protocol.enqueue import EnqueueCalls, NewJob
from antre.protocol.extend_lease import extend_lease_op
from antre.settings import QueueSettings, WorkerSettings

from bench import _harness as h
from bench import _results

QUEUE = QueueSettings(name="bench")
WORKER = WorkerSettings(visibility_timeout_s=300)
WORKER_ID = "bench-worker-0123456789abcdef"
#: The no-op handler the peer comparison's antre workers run (its queue is QUEUE's).
DRAIN_HANDLERS = "bench.adapters.antre_jobs"


def whole_prelude(script: scripts.Script) -> scripts.Script:
    """``script`` with the whole prelude before its body, as scripts were loaded before."""
    package = resources.files("antre.protocol")
    body = package.joinpath(f"{script.name}.lua").read_text(encoding="utf-8")
    text = package.joinpath("_prelude.lua").read_text(encoding="utf-8") + "\n" + body
    return scripts.Script(script.name, text, hashlib.sha1(text.encode()).hexdigest())


class CountedServer:
    """A redis-server under callgrind; :meth:`count` runs a step and returns the instructions
    Redis spent on it."""

    def __init__(self, dumps: Path) -> None:
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            self.port = probe.getsockname()[1]
        self.dumps = dumps
        self.process = subprocess.Popen(
            ["valgrind", "--tool=callgrind", f"--callgrind-out-file={dumps}/cg.%p",
             h.pick_redis_server(), "--port", str(self.port), "--save", "", "--appendonly", "no"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        self.client = redis.Redis(port=self.port, decode_responses=True)
        h.wait_until(self._answers, timeout_s=120, message="redis-server under callgrind")
        self._dumped = 0

    def _answers(self) -> bool:
        try:
            return bool(self.client.ping())
        except redis.ConnectionError:
            return False

    def _control(self, *args: str) -> None:
        subprocess.run(["callgrind_control", *args, str(self.process.pid)], check=True,
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=120)

    def count(self, step: Callable[[], None]) -> int:
        self._control("--zero")
        step()
        self._control("--dump")
        self._dumped += 1
        dump = self.dumps / f"cg.{self.process.pid}.{self._dumped}"
        for line in dump.read_text(errors="replace").splitlines():
            if line.startswith(("totals:", "summary:")):
                return int(line.split()[1])
        raise h.BenchError(f"{dump}: no totals line")

    def stop(self) -> None:
        self.client.shutdown(nosave=True)
        self.process.wait(timeout=120)


def measure(server: CountedServer, calls: int, whole: bool) -> dict[str, float]:
    """Instructions per call of each step, the scripts loaded as antre loads them or with the
    whole prelude."""
    r = server.client
    r.flushall()
    # A worker of this version is registered, so jobs are queued as fields (as in production).
    beat = extend_lease_op(QUEUE, [], lease_ms=WORKER.lease_ms, worker_id=WORKER_ID,
                           registry_entry_json='{"pod":"bench"}', registry_ttl_ms=600_000)

    swapped: dict[str, scripts.Script] = {}

    def call(op: scripts.Op[Any]) -> Any:
        script = swapped.get(op.script.name)
        if script is None:  # loaded once, before its step: no NOSCRIPT round in the counts
            script = swapped[op.script.name] = whole_prelude(op.script) if whole else op.script
            r.script_load(script.text)
        return scripts.run(r, dataclasses.replace(op, script=script))

    call(beat)
    enqueue = EnqueueCalls(QUEUE)
    leases: list[tuple[str, int]] = []
    empty = r.script_load("return 1")
    # The first call of each script is made before the counts: the script is loaded then.
    enqueues = [enqueue.ops([NewJob("t", {"n": n})])[0] for n in range(calls + 1)]
    call(enqueues.pop())
    first = call(claim_op(QUEUE, WORKER, worker_id=WORKER_ID, max_jobs=1)).jobs[0]
    call(ack_op(QUEUE, [(first.id, first.lease)], worker_id=WORKER_ID))

    def enqueue_step() -> None:
        for op in enqueues:
            call(op)

    def claim_step() -> None:
        for _ in range(calls):
            [job] = call(claim_op(QUEUE, WORKER, worker_id=WORKER_ID, max_jobs=1)).jobs
            leases.append((job.id, job.lease))

    def renew_step() -> None:
        for lease in leases:
            call(extend_lease_op(QUEUE, [lease], lease_ms=WORKER.lease_ms, worker_id=WORKER_ID,
                                 registry_entry_json='{"pod":"bench"}', registry_ttl_ms=600_000))

    def ack_step() -> None:
        for lease in leases:
            call(ack_op(QUEUE, [lease], worker_id=WORKER_ID))

    def empty_step() -> None:
        for _ in range(calls):
            r.evalsha(empty, 0)

    steps = {"empty script": empty_step, "enqueue": enqueue_step, "claim": claim_step,
             "renew lease": renew_step, "ack": ack_step}
    return {name: server.count(step) / calls for name, step in steps.items()}


def measure_drain(server: CountedServer, jobs: int, *, as_fields: bool) -> float:
    """Redis instructions per job while ``antre worker`` drains ``jobs`` no-op jobs."""
    r = server.client
    r.flushall()
    url = f"redis://127.0.0.1:{server.port}/0"
    queue = antre.Queue.from_url(url, settings=QUEUE)
    keys = queue.settings.keys
    try:
        if as_fields:  # a worker of this version registered while the jobs are enqueued
            r.zadd(keys.workers, {WORKER_ID: time.time() * 1000})
            r.zadd(keys.field_readers, {WORKER_ID: time.time() * 1000})
        queue.enqueue_many([("noop", None)] * jobs)
        r.zrem(keys.workers, WORKER_ID)
        r.zrem(keys.field_readers, WORKER_ID)
    finally:
        queue.close()
    with tempfile.TemporaryDirectory() as logs:
        workers = h.Workers(h.child_env(url, Path(logs)), Path(logs))

        def drain() -> None:
            workers.start([sys.executable, "-m", "antre", "worker", "--handlers", DRAIN_HANDLERS,
                           "--queue", QUEUE.name, "--redis-url", url])
            h.wait_until(lambda: int(r.hget(keys.stats, "done") or 0) >= jobs,
                         timeout_s=1800, interval_s=0.5,
                         message=f"the worker to finish {jobs} jobs under callgrind")

        try:
            return server.count(drain) / jobs
        finally:
            workers.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=400)
    parser.add_argument("--drain", type=int, default=0, metavar="N",
                        help="also count a worker's drain of N jobs (0: not)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as dumps:
        started = time.perf_counter()
        server = CountedServer(Path(dumps))
        try:
            print(f"redis-server {server.client.info('server')['redis_version']} under callgrind; "
                  f"{h.load_line()}", flush=True)
            loaded = measure(server, args.calls, whole=False)
            whole = measure(server, args.calls, whole=True)
            drained = {form: measure_drain(server, args.drain, as_fields=form == "fields")
                       for form in ("fields", "Hashes")} if args.drain else {}
        finally:
            server.stop()
    print(f"{args.calls} calls per step and variant, {time.perf_counter() - started:.0f} s\n")
    rows = [[name, f"{loaded[name]:,.0f}", f"{whole[name]:,.0f}",
             f"{loaded[name] / whole[name] - 1:+.1%}"] for name in loaded]
    print(h.table(["step (one job per call)", "instructions per call, as loaded",
                   "with the whole prelude", "change"], rows))
    if drained:
        print(f"\nA worker's drain of {args.drain:,} jobs (antre worker, defaults, no-op handler):\n")
        print(h.table(["jobs queued as", "Redis instructions per job"],
                      [["fields (a worker was registered)", f"{drained['fields']:,.0f}"],
                       ["Hashes (no worker was registered)", f"{drained['Hashes']:,.0f}"]]))


if __name__ == "__main__":
    _results.run_and_keep(main, __file__)
