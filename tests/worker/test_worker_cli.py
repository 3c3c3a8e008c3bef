"""The ``antre`` command line, in-process (``antre.cli.main``) and as a subprocess: enqueue, stats,
job history (with the attempt a release refunded), dlq list/replay/purge (--all taking only the
jobs dead when it starts), one-line errors with a non-zero exit, the worker's and the API's own
log lines (start, signal, stop) at any level, the demo keeping away from ANTRE_REDIS_URL, and
help text with defaults on every option."""

from __future__ import annotations

import argparse
import json
import shutil
import signal
import subprocess
import sys
import urllib.request
from pathlib import Path

import pytest
from antre import Queue
from antre.cli import build_parser, main
from antre.commands import EXIT_CONFLICT, EXIT_NOT_FOUND, EXIT_UNAVAILABLE, EXIT_USAGE
from antre.protocol import scripts
from antre.protocol.ack import ack_op
from antre.protocol.claim import claim_op
from antre.protocol.fail import fail_op
from antre.protocol.release import release_op
from antre.settings import QueueSettings, WorkerSettings
from invariants import assert_invariants, read_record
from operations import queue_states
from redis_servers import child_env, free_port, wait_until

QS = QueueSettings(name="cli")
#: The installed console script when there is one, else the same entry point through -m.
ANTRE = [shutil.which("antre")] if shutil.which("antre") else [sys.executable, "-m", "antre"]


def cli(redis_url, *args):
    return main([args[0], "--redis-url", redis_url, "--queue", "cli", *args[1:]])


def test_enqueue_prints_the_id(redis_client, redis_url, capsys):
    assert cli(redis_url, "enqueue", "email", '{"to": "a@b.c"}', "--idempotency-key", "k1",
               "--resource-key", "acct", "--max-attempts", "2") == 0
    job_id = capsys.readouterr().out.strip()
    info = Queue(redis_client, settings=QS).get(job_id)
    assert (info.type, info.payload, info.idempotency_key, info.max_attempts) == (
        "email", {"to": "a@b.c"}, "k1", 2)
    assert cli(redis_url, "enqueue", "email", '{"to": "a@b.c"}', "--idempotency-key", "k1") == 0
    out = capsys.readouterr()
    assert out.out.strip() == job_id and f"already used: job {job_id} returned" in out.err
    # The key reused for another payload: refused in one line, not the first job handed out.
    assert cli(redis_url, "enqueue", "email", "{}", "--idempotency-key", "k1") == EXIT_CONFLICT
    out = capsys.readouterr()
    assert out.out == "" and out.err.count("\n") == 1
    assert out.err == (f"antre enqueue: idempotency key k1 was used for job {job_id} with "
                       "another type or payload\n"), "named by its id, not as the call's job 1"
    assert_invariants(redis_client, QS)


def test_stats_json(redis_client, redis_url, capsys):
    queue = Queue(redis_client, settings=QS)
    queue.enqueue("t", 1)
    queue.enqueue("t", 2, delay=60)
    assert cli(redis_url, "stats", "--json") == 0
    data = json.loads(capsys.readouterr().out)
    assert {k: data[k] for k in ("queue", "ready", "processing", "retry", "dead", "done")} == {
        "queue": "cli", "ready": 1, "processing": 0, "retry": 1, "dead": 0, "done": 0}


def test_job_shows_history(redis_client, redis_url, capsys):
    ws = WorkerSettings()
    job_id = Queue(redis_client, settings=QS).enqueue("t", {"a": 1}).job_id
    [job] = scripts.run(redis_client, claim_op(QS, ws, worker_id="w-1", max_jobs=1)).jobs
    scripts.run(redis_client, fail_op(QS, (job.id, job.lease), error="boom", retry_delay_ms=0,
                                      worker_id="w-1"))
    [job] = scripts.run(redis_client, claim_op(QS, ws, worker_id="w-2", max_jobs=1)).jobs
    scripts.run(redis_client, ack_op(QS, [(job.id, job.lease)], worker_id="w-2"))
    assert cli(redis_url, "job", job_id) == 0
    out = capsys.readouterr().out
    assert f"job {job_id}  type=t  status=done  attempt=2/5" in out
    lines = [line.split() for line in out.splitlines() if line.startswith("    ")]
    assert [line[2] for line in lines] == ["enqueued", "claimed", "retrying", "claimed", "acked"]
    assert "worker=w-1" in out and "error=boom" in out and "worker=w-2" in out
    assert cli(redis_url, "job", job_id, "--json") == 0
    data = json.loads(capsys.readouterr().out)
    assert [e["event"] for e in data["history"]] == ["enqueued", "claimed", "retrying", "claimed", "acked"]


def test_dlq_list_replay_purge(redis_client, redis_url, capsys):
    queue = Queue(redis_client, settings=QS)
    ids = [queue.enqueue("t", i, max_attempts=1).job_id for i in range(3)]
    for _ in ids:
        [job] = scripts.run(redis_client, claim_op(QS, WorkerSettings(), worker_id="w", max_jobs=1)).jobs
        scripts.run(redis_client, fail_op(QS, (job.id, job.lease), error=f"bad {job.payload_json}",
                                          retry_delay_ms=0, worker_id="w"))
    assert cli(redis_url, "dlq", "list") == 0
    out = capsys.readouterr()
    listed = [line.split()[0] for line in out.out.splitlines()]
    died_at = [int(read_record(redis_client, QS, job_id).get("died_at")) for job_id in listed]
    assert sorted(listed) == sorted(ids) and died_at == sorted(died_at, reverse=True)  # newest first
    assert "bad 0" in out.out and "3 dead job(s) shown" in out.err
    assert cli(redis_url, "dlq", "replay", ids[0]) == 0
    assert capsys.readouterr().out.strip() == "replayed 1 job(s)"
    assert queue.get(ids[0]).status == "queued"
    assert cli(redis_url, "dlq", "purge") == EXIT_USAGE  # deleting everything takes --all
    assert "give job ids, or --all" in capsys.readouterr().err
    assert cli(redis_url, "dlq", "purge", "--all") == 0
    assert capsys.readouterr().out.strip() == "purged 2 job(s)"
    assert redis_client.zcard(QS.keys.dead) == 0
    assert_invariants(redis_client, QS)


def dead_in_order(queue, count=250):
    """``count`` jobs dead-lettered through the real scripts; their ids, oldest death first."""
    for _ in range(2):
        queue_states.dead_letters(queue, [("boom", count // 2)])
    return queue.redis.zrange(QS.keys.dead, 0, -1)


def meanwhile_once(monkeypatch, meanwhile, *, script=None):
    """Runs ``meanwhile`` once, right after the first script call of a Queue (of ``script``
    only, when given), as another client would; the calls it makes itself pass by."""
    run, pending = Queue._run, [meanwhile]

    def run_then_meanwhile(self, op):
        reply = run(self, op)
        if pending and script in (None, op.script.name):
            pending.pop()()
        return reply

    monkeypatch.setattr(Queue, "_run", run_then_meanwhile)


def die_again(queue):
    """Claims the job at the head of the queue and fails it for good; returns its id."""
    [lease] = queue_states.claim(queue, 1)
    assert queue_states.fail(queue, lease, error="again", retry_delay_ms=None) == "dead"
    return lease[0]


def test_dlq_replay_all_replays_no_job_twice(redis_client, redis_url, capsys, monkeypatch):
    """Before: `dlq replay --all` called the client's replay of the oldest again until the
    count dead at its start was replayed. One whose first script call replayed 100 of 250,
    while another client purged 60 of the oldest and one of the 100 died again, came short of
    that count, and the next replay took that job a second time."""
    queue = Queue(redis_client, settings=QS)
    dead = dead_in_order(queue)
    died_again = []

    def meanwhile():
        assert queue.purge(redis_client.zrange(QS.keys.dead, 0, 59)) == 60
        died_again.append(die_again(queue))

    meanwhile_once(monkeypatch, meanwhile, script="replay")
    assert cli(redis_url, "dlq", "replay", "--all") == 0
    assert capsys.readouterr().out.strip() == "replayed 190 job(s)"
    [again] = died_again
    assert again in dead[:100] and redis_client.zrange(QS.keys.dead, 0, -1) == [again]
    assert queue.stats().counters["replayed"] == 190


def test_dlq_purge_all_purges_no_job_that_died_after_it_began(redis_client, redis_url, capsys,
                                                              monkeypatch):
    """Before: `dlq purge --all` read the count dead at its start (250), then purged the oldest
    up to that count. Right after its first script call, a job died for the first time, and
    another client replayed the 30 newest dead jobs, one of which died again: the purge, 28
    short of its count at the end of the list, had taken those two as well (222 purged),
    deleting jobs never seen dead. Now it takes only the jobs dead at its first call."""
    queue = Queue(redis_client, settings=QS)
    dead = dead_in_order(queue)
    died = []

    def meanwhile():
        [fresh] = queue_states.dead_letters(queue, [("first death", 1)])
        assert sorted(queue.replay(dead[-30:])) == sorted(dead[-30:])
        died.extend([fresh, die_again(queue)])

    meanwhile_once(monkeypatch, meanwhile)
    assert cli(redis_url, "dlq", "purge", "--all") == 0
    assert capsys.readouterr().out.strip() == "purged 220 job(s)"
    fresh, again = died
    assert again in dead[-30:]
    assert redis_client.zrange(QS.keys.dead, 0, -1) == [fresh, again]
    assert queue.get(fresh).status == queue.get(again).status == "dead"
    assert queue.stats().counters["purged"] == 220


@pytest.mark.parametrize(("args", "code", "message"), [
    pytest.param(["enqueue", "t", "{bad"], EXIT_USAGE, "antre enqueue: payload: not valid JSON",
                 id="bad-json"),
    pytest.param(["job", "nope"], EXIT_NOT_FOUND, "antre job: job nope: no such job", id="unknown-job"),
    pytest.param(["dlq", "list", "--limit", "0"], EXIT_USAGE, "antre dlq: --limit: got 0", id="bad-limit"),
    pytest.param(["cancel", "nope"], EXIT_NOT_FOUND, "antre cancel: job nope: no such job",
                 id="cancel-unknown-job"),
    pytest.param(["worker", "--handlers", "x", "--visibility-timeout", "0.1"], EXIT_USAGE,
                 "antre worker: --visibility-timeout (env ANTRE_VISIBILITY_TIMEOUT): got 0.1; "
                 "must be a number from 1 to 86400", id="flag-named-in-settings-error"),
    pytest.param(["enqueue", "t", "{}", "--delay", "inf"], EXIT_USAGE,
                 "antre enqueue: delay: got inf; must be a number of seconds from 0 to",
                 id="infinite-delay"),
    pytest.param(["enqueue", "t", "[" * 20_000 + "]" * 20_000], EXIT_USAGE,
                 "antre enqueue: payload: not valid JSON (maximum recursion depth",
                 id="deeply-nested-json"),
    pytest.param(["enqueue", "t", '{"note": "\\ud800"}'], EXIT_USAGE,
                 "antre enqueue: payload: got '{\"note\":\"\\ud800\"}'; must be valid Unicode "
                 "text", id="lone-surrogate-payload"),
    pytest.param(["job", "\udcff"], EXIT_USAGE,
                 "antre: argument '\\udcff': not valid UTF-8 text", id="undecodable-argument"),
    # Review findings: accepted before, or a partial answer then an error.
    pytest.param(["inspect", "--rows", "-1"], EXIT_USAGE,
                 "antre inspect: --rows: got -1; must be an integer >= 1", id="negative-rows"),
    pytest.param(["demo", "--jobs", "10000000000"], EXIT_USAGE,
                 "antre demo: --jobs: got 10000000000; must be an integer from 1 to 1,000,000",
                 id="demo-without-end"),
    pytest.param(["dlq", "purge", "a:b"], EXIT_USAGE,
                 "antre dlq: job ids: got 'a:b'; must be a job id", id="impossible-id"),
    pytest.param(["enqueue", "t\x85", "{}"], EXIT_USAGE,
                 "antre enqueue: type: got 't\\x85'; must be a non-empty string", id="c1-control"),
])
def test_user_errors_are_one_line(redis_client, redis_url, capsys, args, code, message):
    assert cli(redis_url, *args) == code
    out = capsys.readouterr()
    assert out.out == ""
    assert out.err.startswith(message) and out.err.count("\n") == 1


def test_unreachable_redis_in_process(capsys):
    url = f"redis://127.0.0.1:{free_port()}/0"
    assert main(["stats", "--redis-url", url]) == EXIT_UNAVAILABLE
    err = capsys.readouterr().err
    assert err.startswith(f"antre stats: Redis at {url} is unreachable") and err.count("\n") == 1


@pytest.mark.parametrize(("args", "code", "start"), [
    pytest.param(["enqueue", "t", "not json"], EXIT_USAGE, "antre enqueue: payload: not valid JSON",
                 id="bad-json"),
    pytest.param(["stats"], EXIT_UNAVAILABLE, "antre stats: Redis at", id="unreachable"),
])
def test_subprocess_errors_without_traceback(args, code, start):
    env = {**child_env(), "ANTRE_REDIS_URL": f"redis://127.0.0.1:{free_port()}/0"}
    proc = subprocess.run([*ANTRE, *args], capture_output=True, text=True,
                          env=env, timeout=60)
    assert proc.returncode == code
    assert proc.stderr.startswith(start) and proc.stderr.count("\n") == 1
    assert "Traceback" not in proc.stderr


@pytest.mark.parametrize(("args", "env"), [
    pytest.param(["api", "--log-level", "LOUD"], {"ANTRE_API_TOKEN": "t0ken"}, id="api-flag"),
    pytest.param(["worker", "--handlers", "antre.example_handlers"],
                 {"ANTRE_LOG_LEVEL": "verbose"}, id="worker-env"),
])
def test_a_bad_log_level_is_one_line_naming_the_levels(redis_url, args, env):
    proc = subprocess.run([*ANTRE, *args, "--redis-url", redis_url], capture_output=True,
                          text=True, env={**child_env(), **env}, timeout=60)
    value = "LOUD" if "--log-level" in args else "verbose"
    assert (proc.returncode, proc.stderr) == (
        EXIT_USAGE, f"antre {args[0]}: --log-level (env ANTRE_LOG_LEVEL): got {value!r}; must be "
                    "one of DEBUG, INFO, WARNING, ERROR, CRITICAL\n")


def test_subprocess_enqueue_and_stats(redis_client, redis_url):
    env = {**child_env(), "ANTRE_REDIS_URL": redis_url, "ANTRE_QUEUE": "cli"}
    proc = subprocess.run([*ANTRE, "enqueue", "t", '{"x": 1}'],
                          capture_output=True, text=True, env=env, timeout=60)
    assert proc.returncode == 0, proc.stderr
    job_id = proc.stdout.strip()
    assert Queue(redis_client, settings=QS).get(job_id).payload == {"x": 1}


def test_a_payload_longer_than_a_command_line_comes_from_standard_input(redis_client,
                                                                         redis_url):
    """A command line takes about 128 KiB per argument; a queue takes 256 KiB by default."""
    payload = {"text": "x" * 200_000}
    env = {**child_env(), "ANTRE_REDIS_URL": redis_url, "ANTRE_QUEUE": "cli"}
    proc = subprocess.run([*ANTRE, "enqueue", "t", "-"], input=json.dumps(payload),
                          capture_output=True, text=True, env=env, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert Queue(redis_client, settings=QS).get(proc.stdout.strip()).payload == payload


def test_worker_imports_handlers_from_the_current_directory(redis_client, redis_url, tmp_path):
    """`cd app && antre worker --handlers myjobs` works without PYTHONPATH, as with Celery/RQ."""
    (tmp_path / "cwd_jobs.py").write_text(
        "import antre\n\n@antre.handler('hello')\nasync def hello(job):\n    pass\n")
    env = child_env()
    env.pop("PYTHONPATH", None)
    job_id = Queue(redis_client, settings=QS).enqueue("hello").job_id
    proc = subprocess.Popen([*ANTRE, "worker", "--handlers", "cwd_jobs", "--redis-url", redis_url,
                             "--queue", QS.name], cwd=tmp_path, env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        wait_until(lambda: Queue(redis_client, settings=QS).get(job_id).status == "done",
                   timeout_s=20, message="the job done by a worker started in its directory")
    finally:
        proc.terminate()
        _, stderr = proc.communicate(timeout=20)
    assert proc.returncode == 0, stderr


def test_job_history_names_the_released_attempt(redis_client, redis_url, capsys):
    job_id = Queue(redis_client, settings=QS).enqueue("t").job_id
    [job] = scripts.run(redis_client, claim_op(QS, WorkerSettings(), worker_id="w-1", max_jobs=1)).jobs
    scripts.run(redis_client, release_op(QS, [(job.id, job.lease)], worker_id="w-1",
                                         reason="shutdown"))
    assert cli(redis_url, "job", job_id) == 0
    out = capsys.readouterr().out
    assert "status=queued  attempt=0/5" in out  # the run was refunded...
    [released] = [line for line in out.splitlines() if " released " in line]
    assert "attempt=1" in released  # ...and the history says which run it was


def json_lines(text):
    return [json.loads(line) for line in text.splitlines() if line.startswith("{")]


def test_worker_logs_its_life_and_the_signal_even_at_warning(redis_client, redis_url):
    """ANTRE_LOG_LEVEL=WARNING drops the per-job lines, never started / stopping / stopped."""
    queue = Queue(redis_client, settings=QS)
    job_id = queue.enqueue("send_email", {"to": "ana@example.com"}).job_id
    env = {**child_env(), "ANTRE_LOG_LEVEL": "WARNING", "ANTRE_GRACE_PERIOD": "7"}
    proc = subprocess.Popen([*ANTRE, "worker", "--handlers", "antre.example_handlers",
                             "--redis-url", redis_url, "--queue", QS.name], env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        wait_until(lambda: queue.get(job_id).status == "done", timeout_s=20,
                   message="the example handler ran the job")
    finally:
        proc.send_signal(signal.SIGTERM)
        _, stderr = proc.communicate(timeout=30)
    assert proc.returncode == 0, stderr
    lines = json_lines(stderr)
    assert [line["msg"] for line in lines] == ["worker started", "stopping", "worker stopped"]
    assert (lines[1]["signal"], lines[1]["grace_period_s"]) == ("SIGTERM", 7.0)


def test_api_logs_listening_the_signal_and_stopped(redis_url):
    port = free_port()
    env = {**child_env(), "ANTRE_API_TOKEN": "t0ken", "ANTRE_LOG_LEVEL": "WARNING"}
    proc = subprocess.Popen([*ANTRE, "api", "--redis-url", redis_url, "--host", "127.0.0.1",
                             "--port", str(port)], env=env, stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, text=True)

    def healthy():
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=1) as answer:
                return answer.status == 200
        except OSError:
            return False

    try:
        wait_until(healthy, timeout_s=20, message="the API answers /healthz")
    finally:
        proc.send_signal(signal.SIGINT)
        _, stderr = proc.communicate(timeout=30)
    assert proc.returncode == 0, stderr
    lines = json_lines(stderr)
    assert [line["msg"] for line in lines] == ["api listening", "api stopping", "api stopped"]
    assert lines[0]["addresses"] == [f"127.0.0.1:{port}"] and lines[1]["signal"] == "SIGINT"


def test_demo_ignores_antre_redis_url_and_says_so(redis_client, redis_url):
    proc = subprocess.run([*ANTRE, "demo", "--jobs", "20"], capture_output=True, text=True,
                          env={**child_env(), "ANTRE_REDIS_URL": redis_url}, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert "ANTRE_REDIS_URL is set but not used" in proc.stdout
    assert "started a throwaway redis-server at redis://127.0.0.1:" in proc.stdout
    assert redis_client.dbsize() == 0  # nothing written to the Redis in the environment
    assert proc.stderr == ""  # the progress lines on stdout tell the story; no log lines
    help_text = subprocess.run([*ANTRE, "demo", "--help"], capture_output=True, text=True,
                               env=child_env(), timeout=60).stdout
    assert "default: a throwaway redis-server" in " ".join(help_text.split())


def test_every_option_has_help_and_shows_its_default():
    parser = build_parser()
    [subparsers] = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    missing = []
    for name, command_parser in subparsers.choices.items():
        for action in command_parser._actions:
            if isinstance(action, argparse._HelpAction):
                continue
            text = action.help or ""
            shows_default = "default" in text or action.default in (None, False, [])
            if not text or not shows_default:
                missing.append(f"antre {name} {'/'.join(action.option_strings) or action.dest}")
    assert missing == []


#: What only ``antre api``, the diagnosis commands, producers and a worker serving /metrics use;
#: a worker starting without --metrics-port must not import it.
NOT_FOR_THE_WORKER = ("aiohttp.web", "jinja2", "antre.api", "antre.dashboard", "antre.findings",
                      "antre.snapshots", "prometheus_client", "antre.metrics", "antre.client",
                      "antre.enqueue_batcher")


def _modules_after(command: str) -> list[str]:
    code = ("import json, sys\nfrom antre import cli\n"
            f"try:\n    cli.main([{command!r}, '--help'])\nexcept SystemExit:\n    pass\n"
            "print(json.dumps(sorted(sys.modules)))\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         timeout=60)
    return json.loads(out.stdout.splitlines()[-1])


def test_each_command_imports_only_what_it_uses():
    def heavy(modules: list[str]) -> list[str]:
        return [m for m in modules if m.startswith(NOT_FOR_THE_WORKER)]
    worker_modules = _modules_after("worker")
    assert heavy(worker_modules) == []
    # Not even the other commands' modules.
    assert [m for m in worker_modules if m.startswith("antre.commands.")] == [
        "antre.commands.worker"]
    assert "aiohttp.web" in heavy(_modules_after("api"))  # ...which the api command does import
    assert "antre.findings" in heavy(_modules_after("doctor"))


def test_a_running_worker_without_a_metrics_port_imports_neither_http_server_nor_producer(
        redis_client, redis_url, tmp_path):
    """The handler reports what the worker process has imported by the time it runs a job:
    not the HTTP server, not prometheus-client, and not the producer's client, although the
    handler module does ``import antre`` and uses its names."""
    (tmp_path / "probe_jobs.py").write_text(
        "import sys\nimport antre\n\n@antre.handler('probe')\nasync def probe(job):\n"
        f"    heavy = sorted(m for m in sys.modules if m.startswith({NOT_FOR_THE_WORKER!r}))\n"
        "    raise antre.Permanent('loaded: ' + ','.join(heavy))\n")
    queue = Queue(redis_client, settings=QS)
    job_id = queue.enqueue("probe").job_id
    proc = subprocess.Popen([*ANTRE, "worker", "--handlers", "probe_jobs", "--redis-url",
                             redis_url, "--queue", QS.name], cwd=tmp_path, env=child_env(),
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_until(lambda: queue.get(job_id).status == "dead", timeout_s=20,
                   message="the probe job run")
    finally:
        proc.terminate()
        proc.wait(timeout=20)
    assert queue.get(job_id).last_error == "Permanent: loaded: "


def test_the_command_table_names_each_command_of_its_module():
    from antre import cli, commands

    for name, module in cli.MODULES:
        command = cli.load_command(name)
        assert isinstance(command, commands.Command) and command.name == name
        assert command.run.__module__ == f"antre.commands.{module}"
    assert len(dict(cli.MODULES)) == len(cli.MODULES)  # no name twice
    command_modules = {path.stem for path in Path(commands.__file__).parent.glob("*.py")}
    assert command_modules - {"__init__"} == {module for _, module in cli.MODULES}
