"""``antre reaper`` in a loop (without ``--once``) through a Redis outage.

Covers: the loop waits the outage out instead of exiting (a pass is one atomic script call, so
a failed one changed nothing); it says so once when Redis goes away and once when it is back,
not once per pass; and its passes resume: an expired lease left after the outage is requeued.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from antre import Queue, QueueSettings
from antre.protocol import scripts
from antre.protocol.claim import claim_op
from antre.settings import WorkerSettings
from redis_servers import RedisServer, child_env, wait_until

#: The reaper loop's interval (s); the outage lasts OUTAGE_PASSES of them.
INTERVAL_S, OUTAGE_PASSES = 0.1, 5


def test_a_reaper_loop_waits_an_outage_out_and_resumes(tmp_path: Path) -> None:
    server = RedisServer().start()
    out, err = tmp_path / "out", tmp_path / "err"
    with out.open("wb") as stdout, err.open("wb") as stderr:
        reaper = subprocess.Popen(
            [sys.executable, "-m", "antre", "reaper", "--interval", str(INTERVAL_S), "--queue", "q",
             "--redis-url", server.url], env=child_env(), stdout=stdout, stderr=stderr)
    try:
        server.kill()
        wait_until(lambda: f"trying again every {INTERVAL_S:g} s" in err.read_text(), timeout_s=15,
                   message="the reaper saying Redis went away")
        # The outage goes on for several passes: none may exit the loop or say so again.
        time.sleep(OUTAGE_PASSES * INTERVAL_S)
        assert reaper.poll() is None, err.read_text()
        server.start()
        wait_until(lambda: "Redis answers again" in err.read_text(), timeout_s=15,
                   message="the reaper saying Redis is back")
        lines = err.read_text().splitlines()
        assert len(lines) == 2, lines  # one when it went away, one when it came back
        assert "unreachable" in lines[0]

        queue = Queue.from_url(server.url, settings=QueueSettings(name="q"))
        job_id = queue.enqueue("t", {}).job_id
        scripts.run(queue.redis, claim_op(queue.settings, WorkerSettings(visibility_timeout_s=1),
                                          worker_id="gone", max_jobs=1))
        wait_until(lambda: queue.get(job_id).status == "queued", timeout_s=15,
                   message="the expired lease requeued by the reaper's loop")
        # The reaper prints a pass after its script call returns: the job can be seen queued
        # before the line is written, so the line is waited for, not read at once.
        wait_until(lambda: sum(p["requeued"] for p in _printed_passes(out)) >= 1, timeout_s=15,
                   message="the reaper printing the pass that requeued the lease")
        passes = _printed_passes(out)
        assert sum(p["requeued"] for p in passes) == 1, passes
    finally:
        reaper.send_signal(signal.SIGTERM)
        reaper.wait(timeout=10)
        server.stop()


def _printed_passes(out: Path) -> list[dict[str, Any]]:
    """The passes the reaper has printed so far: whole lines only, as one may be half written."""
    text = out.read_text()
    return [json.loads(line) for line in text[:text.rfind("\n") + 1].splitlines()]
