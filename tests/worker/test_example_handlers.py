"""The example handlers shipped in the package (``antre.example_handlers``), served by a real
``antre worker`` process as the stock image, examples/jobqueue.yaml and the chart's
exampleJobQueue run them: each outcome they document (done, retried then done, dead with the
payload field named)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from antre import Queue
from redis_servers import child_env, wait_until

ANTRE = str(Path(sys.executable).parent / "antre")


def test_example_handlers_in_a_worker(redis_client, redis_url):
    queue = Queue(redis_client, "examples")
    jobs = {
        "sent": queue.enqueue("send_email", {"to": "ana@example.com"}).job_id,
        "flaky": queue.enqueue("send_email", {"to": "bo@example.com", "flaky": True}).job_id,
        "no_address": queue.enqueue("send_email", {"to": 42}).job_id,
        "report": queue.enqueue("refresh_report", {"report": 7}).job_id,
        "broken": queue.enqueue("refresh_report", {"report": 8, "broken": True}).job_id,
        "slept": queue.enqueue("sleep", {"seconds": 0.05}).job_id,
        "bad_sleep": queue.enqueue("sleep", {"seconds": -1}).job_id,
    }
    worker = subprocess.Popen([ANTRE, "worker", "--handlers", "antre.example_handlers",
                               "--redis-url", redis_url, "--queue", "examples"],
                              env=child_env(), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                              text=True)
    try:
        wait_until(lambda: all(queue.get(i).status in ("done", "dead") for i in jobs.values()),
                   timeout_s=30, message="every example job settled")
    finally:
        worker.terminate()
        _, stderr = worker.communicate(timeout=30)
    assert worker.returncode == 0, stderr
    info = {name: queue.get(job_id) for name, job_id in jobs.items()}
    assert {name: i.status for name, i in info.items()} == {
        "sent": "done", "flaky": "done", "no_address": "dead", "report": "done",
        "broken": "dead", "slept": "done", "bad_sleep": "dead"}
    assert info["flaky"].attempt == 2
    assert "payload.to: got 42; must be an email address" in info["no_address"].last_error
    assert "report 8 no longer exists" in info["broken"].last_error
    assert "payload.seconds: got -1; must be from 0 to 3600" in info["bad_sleep"].last_error
