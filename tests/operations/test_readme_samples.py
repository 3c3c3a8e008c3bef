"""README's Python samples, run as written against a real Redis and a real ``antre worker``.

Covers: the producer sample (enqueue with an idempotency key, a delayed job on a resource,
enqueue_many, get, stats) runs and leaves what it says; the handler sample, saved as the
``myapp/jobs.py`` it names, is served by ``antre worker --handlers myapp.jobs``: an async
handler, a plain one that steps through a charge and a receipt, and ``antre.Permanent`` sending
a job straight to the dead letters. Only what the samples leave to the reader is added: the
Redis URL, and the application's own functions (``mailer``, ``charge_card``...) as stubs that
write down what they were asked to do.
"""

from __future__ import annotations

import re
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from antre import Queue
from redis_servers import child_env, wait_until

README = Path(__file__).parents[2] / "README.md"

#: The application the handler sample calls, as a reader's module would define it.
APPLICATION_STUBS = '''\
from pathlib import Path

EFFECTS = Path(__file__).with_name("effects.log")


def _effect(line):
    with EFFECTS.open("a") as log:
        log.write(line + "\\n")


class mailer:
    @staticmethod
    async def send(to, template, dedupe_key):
        _effect(f"mail {to} {template} {dedupe_key}")


def invoice_exists(invoice):
    return invoice != "deleted"


def rate_limited():
    return False


def charge_card(payload):
    _effect(f"charge {payload['invoice']}")
    return f"charge-{payload['invoice']}"


def send_receipt(charge):
    _effect(f"receipt {charge}")

'''


def python_samples() -> list[str]:
    return re.findall(r"```python\n(.*?)```", README.read_text(), re.S)


def test_the_readme_has_the_two_samples_these_tests_run() -> None:
    samples = python_samples()
    assert len(samples) == 2
    assert "antre.Queue.from_url" in samples[0] and samples[1].startswith("# myapp/jobs.py")


def test_the_producer_sample_runs_as_written(redis_url: str,
                                             capsys: pytest.CaptureFixture[str]) -> None:
    sample = python_samples()[0]
    assert sample.count("redis://localhost:6379/0") == 1
    exec(compile(sample.replace("redis://localhost:6379/0", redis_url), str(README), "exec"), {})
    first_line = capsys.readouterr().out.splitlines()[0]
    job_id, created = first_line.split()
    assert created == "True"
    queue = Queue.from_url(redis_url, "emails")
    stats = queue.stats()
    assert (stats.ready, stats.scheduled) == (1001, 1)  # the delayed report waits 30 s
    assert queue.get(job_id).idempotency_key == "welcome-ana"
    again = queue.enqueue("send_email", {"to": "ana@example.com", "template": "welcome"},
                          idempotency_key="welcome-ana", max_attempts=5)
    assert (again.job_id, again.created) == (job_id, False)  # as the sample's comment says


def test_the_handler_sample_is_served_by_a_worker(redis_url: str, tmp_path: Path) -> None:
    sample = python_samples()[1]
    package = tmp_path / "myapp"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "jobs.py").write_text(APPLICATION_STUBS + sample)
    queue = Queue.from_url(redis_url, "emails")
    mail = queue.enqueue("send_email", {"to": "ana@example.com", "template": "welcome"},
                         idempotency_key="welcome-ana").job_id
    invoice = queue.enqueue("sync_invoice", {"invoice": "inv-7"}).job_id
    deleted = queue.enqueue("sync_invoice", {"invoice": "deleted"}).job_id

    worker = subprocess.Popen(
        [sys.executable, "-m", "antre", "worker", "--handlers", "myapp.jobs", "--queue", "emails",
         "--redis-url", redis_url], cwd=tmp_path, env=child_env(),
        stdout=subprocess.DEVNULL, stderr=(tmp_path / "worker.log").open("wb"))
    try:
        wait_until(lambda: [queue.get(j).status for j in (mail, invoice, deleted)]
                   == ["done", "done", "dead"], timeout_s=30,
                   message="the three jobs done or dead")
    finally:
        worker.send_signal(signal.SIGTERM)
        worker.wait(timeout=30)
    assert worker.returncode == 0, (tmp_path / "worker.log").read_text()
    assert sorted((package / "effects.log").read_text().splitlines()) == [
        "charge inv-7", "mail ana@example.com welcome welcome-ana", "receipt charge-inv-7"]
    assert queue.get(deleted).last_error == "Permanent: invoice was deleted"
