"""The operator at scale: 200 JobQueues against kmock's in-memory Kubernetes API (the emulator
of tests/operator) plus one redis-server. It runs the real operator (kopf, in a thread of this
process, as the integration tests do), waits until every JobQueue is Ready, lets it settle, then
measures over a steady-state window:

- operator CPU per polling cycle (CPU time of the operator's threads, not of the emulator's);
- Redis round trips per cycle (client commands seen by MONITOR; commands inside Lua apart);
- Kubernetes requests per minute (every request the emulator served, writes apart).

    python bench/operator_scale.py                       # 200 JobQueues, 60 s window
    python bench/operator_scale.py --jobqueues 50 --window 30

A polling cycle is one pollingIntervalSeconds (default 5 s), in which every JobQueue is polled once.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import os
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench import _harness as h

sys.path.insert(0, str(h.REPO / "tests" / "operator"))

NS = "default"


class Monitor:
    """Counts client commands and commands inside scripts with MONITOR, in a thread."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.counts: collections.Counter[str] = collections.Counter()
        self.counting = False
        self.native_id: int | None = None
        self._thread = threading.Thread(target=self._watch, daemon=True)
        self._ready = threading.Event()

    def start(self) -> None:
        self._thread.start()
        self._ready.wait(5)

    def _watch(self) -> None:
        self.native_id = threading.get_native_id()
        with h.client(self.url).monitor() as monitor:
            self._ready.set()
            for entry in monitor.listen():
                command = entry["command"]
                if command.startswith("ECHO") and "monitor-stop" in command:
                    return
                if self.counting:
                    lua = entry.get("client_type") == "lua"
                    self.counts[("lua " if lua else "") + command.split(" ", 1)[0].upper()] += 1

    def stop(self) -> None:
        h.client(self.url).echo("monitor-stop")
        self._thread.join(10)


def operator_cpu_s(excluded: set[int]) -> float:
    """CPU seconds of every thread of this process but the excluded ones (the emulator's loop in
    the main thread, the MONITOR reader)."""
    import psutil
    return sum(t.user_time + t.system_time for t in psutil.Process().threads() if t.id not in excluded)


async def run(args: argparse.Namespace) -> int:
    import kmock
    from antre_operator.settings import OperatorSettings
    from operator_emulation import (
        Emulator,
        OperatorThread,
        condition,
        create,
        declare_resources,
        eventually,
        jobqueue,
        method_of,
        write_kubeconfig,
    )

    server = h.start_redis()
    monitor = Monitor(server.url)
    monitor.start()
    tmp = Path(tempfile.mkdtemp(prefix="antre-opscale-"))
    try:
        async with Emulator() as k8s, kmock.Server(k8s):
            declare_resources(k8s)
            os.environ["KUBECONFIG"] = str(write_kubeconfig(tmp / "kubeconfig", str(k8s.url).rstrip("/")))
            os.environ.pop("KUBERNETES_SERVICE_HOST", None)
            operator = OperatorThread(OperatorSettings(namespaces=(), metrics_port=None, redis_timeout_s=5.0))
            await operator.start(timeout_s=60)
            try:
                started = time.monotonic()
                names = [f"q{i:03d}" for i in range(args.jobqueues)]
                for name in names:
                    await create(k8s, jobqueue(name, NS, server.url,
                                               autoscaling={"pollingIntervalSeconds": args.interval}))

                def ready_count() -> int:
                    return sum(1 for name in names
                               if (c := condition(k8s.live("jobqueues", NS, name), "Ready"))
                               and c.get("status") == "True")

                await eventually(lambda: ready_count() == len(names), timeout_s=args.ready_timeout,
                                 message=f"{len(names)} JobQueues Ready", interval_s=0.5)
                ready_s = time.monotonic() - started
                print(f"{len(names)} JobQueues Ready after {ready_s:.1f} s "
                      f"({len(k8s.all_requests)} Kubernetes requests so far); settling "
                      f"{args.settle:.0f} s", flush=True)
                await asyncio.sleep(args.settle)

                excluded = {threading.main_thread().native_id, monitor.native_id or -1}
                requests_before = len(k8s.all_requests)
                cpu_before, wall_before = operator_cpu_s(excluded), time.monotonic()
                monitor.counting = True
                await asyncio.sleep(args.window)
                monitor.counting = False
                cpu = operator_cpu_s(excluded) - cpu_before
                window = time.monotonic() - wall_before
                served = k8s.all_requests[requests_before:]
            finally:
                await operator.stop()
    finally:
        monitor.stop()
        server.stop()

    cycles = window / args.interval
    client_side = {k: v for k, v in monitor.counts.items() if not k.startswith("lua ")}
    in_lua = sum(v for k, v in monitor.counts.items() if k.startswith("lua "))
    by_method = collections.Counter(method_of(r) for r in served)
    writes = sum(v for k, v in by_method.items() if k in ("POST", "PUT", "PATCH", "DELETE"))
    per_minute = 60 / window
    rows = [
        ["JobQueues (one Redis, all idle)", f"{args.jobqueues}"],
        ["polling interval", f"{args.interval} s; window {window:.0f} s = {cycles:.1f} cycles"],
        ["time until all Ready", f"{ready_s:.1f} s"],
        ["operator CPU per polling cycle",
         f"{cpu / cycles * 1000:,.0f} ms ({cpu / window * 100:.1f}% of one core)"],
        ["operator CPU per JobQueue poll", f"{cpu / cycles / args.jobqueues * 1000:.2f} ms"],
        ["Redis round trips per cycle", f"{sum(client_side.values()) / cycles:,.0f} "
         f"({sum(client_side.values()) / cycles / args.jobqueues:.2f} per JobQueue)"],
        ["Redis commands inside Lua per cycle", f"{in_lua / cycles:,.0f}"],
        ["Kubernetes requests per minute", f"{len(served) * per_minute:,.1f} "
         f"(writes {writes * per_minute:,.1f})"],
    ]
    print()
    print(h.table(["figure", "value"], rows))
    print("\nRedis client commands per cycle: " + ", ".join(
        f"{k} {v / cycles:,.1f}" for k, v in sorted(client_side.items(), key=lambda kv: -kv[1])))
    print("Kubernetes requests in the window by method: " + (", ".join(
        f"{k} {v}" for k, v in sorted(by_method.items())) or "none"))
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--jobqueues", type=int, default=200)
    parser.add_argument("--interval", type=int, default=5, help="pollingIntervalSeconds of each JobQueue")
    parser.add_argument("--window", type=float, default=60.0, help="steady-state seconds measured")
    parser.add_argument("--settle", type=float, default=15.0, help="seconds after all are Ready")
    parser.add_argument("--ready-timeout", type=float, default=600.0)
    args = parser.parse_args()
    return asyncio.run(run(args))


if __name__ == "__main__":
    sys.exit(main())
