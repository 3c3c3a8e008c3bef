"""``antre inspect``, ``antre doctor`` and ``antre top`` against real Redis, on states built on
purpose through the protocol scripts (see queue_states).

Covers: a stuck lease (shown with its worker and age; doctor exits 2 with stuck_leases), an
overdue retry (overdue_retries), a dead-letter burst grouped by last error (dead_letter_burst),
a resource lock found by SCAN with its TTL, live workers with their last heartbeat, a healthy
queue (exit 0), the JSON outputs, ``top --iterations`` and the two-sample trend; hand-backs
and shutdown releases told apart in inspect's and stats' counters and ``antre job``'s history.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from antre import Queue, cli, findings, snapshots

from operations import queue_states


def run(capsys: pytest.CaptureFixture[str], redis_url: str, *argv: str) -> tuple[int, str]:
    code = cli.main([argv[0], "--redis-url", redis_url, "--queue", "q", "--sample-gap", "0",
                     *argv[1:]])
    return code, capsys.readouterr().out


@pytest.fixture
def queue(redis_client: Any) -> Queue:
    return Queue(redis_client, "q")


def test_healthy_queue_is_all_clear(queue: Queue, redis_url: str, capsys: Any) -> None:
    queue_states.register_worker(queue)
    queue.enqueue_many([("t", i) for i in range(3)])
    code, out = run(capsys, redis_url, "doctor")
    assert (code, out.strip()) == (0, "queue q: no findings, all clear")
    code, out = run(capsys, redis_url, "inspect")
    assert code == 0
    assert "ready 3" in out and "workers (1)" in out and "w-1  pod=pod-1  jobs 0/4" in out


def test_stuck_lease(queue: Queue, redis_url: str, capsys: Any) -> None:
    queue_states.register_worker(queue)
    job_id = queue_states.stuck_lease(queue, expired_s=90, resource_key="acct-7")
    code, out = run(capsys, redis_url, "inspect")
    assert f"{job_id}  resize  worker=dead-worker  attempt=1  expired 90." in out
    # The lock the claim took is found by SCAN, with the holder still in the processing set.
    assert f"acct-7  job={job_id}  ttl " in out and "holder not processing" not in out
    code, out = run(capsys, redis_url, "doctor")
    assert code == 2
    assert "CRITICAL stuck_leases: 1 lease(s) expired" in out
    assert "antre reaper --once" in out


def test_overdue_retry(queue: Queue, redis_url: str, capsys: Any) -> None:
    queue_states.register_worker(queue)
    job_id = queue_states.overdue_retry(queue, overdue_s=120)
    code, out = run(capsys, redis_url, "inspect")
    assert "overdue retries (due > 30.0s ago) (1)" in out
    assert f"{job_id}  charge  attempt=1  overdue 2.0m  TimeoutError: upstream" in out
    code, out = run(capsys, redis_url, "doctor", "--json")
    assert code == 2
    assert [f["code"] for f in json.loads(out)] == ["overdue_retries"]


def test_dead_letter_burst_grouped_by_error(queue: Queue, redis_url: str, capsys: Any) -> None:
    queue_states.register_worker(queue)
    queue_states.dead_letters(queue, [("ValueError: bad address", 9), ("SMTPError: 554", 3)])
    code, out = run(capsys, redis_url, "inspect")
    assert "dead by last error (12)" in out
    lines = [line.strip() for line in out.splitlines()]
    first = next(i for i, line in enumerate(lines) if line.startswith("dead by last error"))
    assert lines[first + 1].startswith("9  ValueError: bad address  [send_email]")
    assert lines[first + 2].startswith("3  SMTPError: 554  [send_email]")
    code, out = run(capsys, redis_url, "doctor")
    assert code == 2
    assert "CRITICAL dead_letter_burst: 12 job(s) dead-lettered" in out
    assert "(9x): ValueError: bad address" in out


def test_hand_backs_and_shutdown_releases_are_told_apart(queue: Queue, redis_url: str,
                                                        capsys: Any) -> None:
    """In the counters of inspect and stats, and in a job's history."""
    handed, released = queue_states.handed_back_and_released(queue)
    _, out = run(capsys, redis_url, "inspect")
    assert "handed_back=1" in out and "released=1" in out
    assert cli.main(["stats", "--redis-url", redis_url, "--queue", "q"]) == 0
    [events] = [line for line in capsys.readouterr().out.splitlines()
                if line.lstrip().startswith("events:")]
    assert "handed_back=1" in events.split() and "released=1" in events.split()
    assert cli.main(["stats", "--redis-url", redis_url, "--queue", "q", "--json"]) == 0
    counters = json.loads(capsys.readouterr().out)["counters"]
    assert (counters["handed_back"], counters["released"]) == (1, 1)
    for job_id, event, reason in ((handed, "handed_back", "prefetched, handed back unstarted"),
                                  (released, "released", "worker shutting down")):
        assert cli.main(["job", "--redis-url", redis_url, "--queue", "q", job_id]) == 0
        [line] = [line for line in capsys.readouterr().out.splitlines()
                  if line.split()[2:3] == [event]]
        assert "attempt=1" in line and f"error={reason}" in line


def test_backlog_without_workers(queue: Queue, redis_url: str, capsys: Any) -> None:
    queue.enqueue("t")
    code, out = run(capsys, redis_url, "doctor", "--fail-on", "critical")
    assert code == 2 and "no_workers" in out


def test_an_earlier_worker_beside_compact_queued_jobs(queue: Queue, redis_url: str,
                                                      capsys: Any) -> None:
    """A worker of an earlier version registers in `workers` only; with jobs queued in the
    compact form (written while this version served the queue alone) doctor says they are
    being lost."""
    queue_states.register_worker(queue)
    queue.enqueue_many([("t", i) for i in range(3)])
    assert queue.redis.hlen(queue.keys.queued) == 3
    queue.redis.set(queue.keys.worker("w-old"), json.dumps({"pod": "pod-old"}), px=30_000)
    queue.redis.zadd(queue.keys.workers, {"w-old": queue_states.server_ms(queue)})
    registry = queue.worker_registry()
    assert {w.worker_id: w.claims_queued_fields for w in registry.entries} == {
        "w-1": True, "w-old": False}
    assert registry.queued_fields == 3
    code, out = run(capsys, redis_url, "doctor")
    assert code == 2
    assert "CRITICAL queued_jobs_with_earlier_workers: 1 worker(s) of an earlier version (w-old)" in out
    code, out = run(capsys, redis_url, "inspect", "--json")
    data = json.loads(out)
    assert data["depth"]["queued_fields"] == 3
    assert {w["worker_id"]: w["claims_queued_fields"] for w in data["workers"]} == {
        "w-1": True, "w-old": False}
    code, out = run(capsys, redis_url, "inspect")
    assert "w-old  pod=pod-old" in out and "(earlier version)" in out
    assert out.count("(earlier version)") == 1
    # An enqueue sees it (the compact jobs came before it): after it leaves the registry,
    # Hashes for the rest of the hour, which doctor says.
    assert data["depth"]["hashes_for_ms"] is None
    queue.enqueue("t", 3)
    queue.redis.delete(queue.keys.worker("w-old"))
    queue.redis.zrem(queue.keys.workers, "w-old")
    code, out = run(capsys, redis_url, "doctor")
    assert "earlier_version_seen_recently: a worker of an earlier version" in out, out
    assert "60 more minute(s)" in out and ":earlier_workers` ends it at once" in out, out


def test_inspect_json(queue: Queue, redis_url: str, capsys: Any) -> None:
    queue_states.register_worker(queue)
    queue_states.stuck_lease(queue)
    queue_states.dead_letters(queue, [("E", 2)])
    code, out = run(capsys, redis_url, "inspect", "--json")
    data = json.loads(out)
    assert code == 0
    assert data["depth"]["expired_leases"] == 1
    assert data["dead_groups"] == [{"last_error": "E", "count": 2, "job_types": ["send_email"],
                                    "newest_id": data["dead_groups"][0]["newest_id"],
                                    "recent": 2}]
    assert [w["worker_id"] for w in data["workers"]] == ["w-1"]
    assert {f["code"] for f in data["findings"]} == {"stuck_leases", "dead_letters"}


def test_top_refreshes_the_given_number_of_times(queue: Queue, redis_url: str,
                                                 capsys: Any) -> None:
    queue_states.stuck_lease(queue)
    code, out = run(capsys, redis_url, "top", "--iterations", "2", "--interval", "0")
    assert code == 0
    assert out.count("queue q   redis time") == 2
    assert out.count("CRITICAL stuck_leases") == 2


def test_trend_compares_two_samples(queue: Queue) -> None:
    queue_states.register_worker(queue)
    before = queue.stats()
    queue.enqueue_many([("t", i) for i in range(5)])
    snapshot = snapshots.read_snapshot(queue, before=before)
    change = findings.trend(snapshot)
    assert change.ready_delta == 5 and change.backlog_delta == 5
    # Reading with a gap takes the first sample itself and waits through the injected sleep.
    waited: list[float] = []
    snapshots.read_snapshot(queue, sample_gap_s=0.5, sleep=waited.append)
    assert waited == [0.5]


def test_a_zero_sample_gap_takes_one_sample(queue: Queue, redis_url: str, capsys: Any) -> None:
    """``--sample-gap 0`` is one sample, as its help says: no trend, rather than rates over the
    few milliseconds between two reads back to back."""
    queue_states.register_worker(queue)
    queue.enqueue_many([("t", i) for i in range(3)])
    snapshot = snapshots.read_snapshot(queue, sample_gap_s=0)
    assert snapshot.before is snapshot.after
    code, out = run(capsys, redis_url, "inspect")
    assert code == 0 and "ready 3 (trend: one sample)" in out
    code, out = run(capsys, redis_url, "inspect", "--json")
    trend = json.loads(out)["trend"]
    assert (trend["interval_s"], trend["ready_rate_per_s"], trend["done_per_s"]) == (0, None, None)


def test_orphaned_and_ttl_less_locks(queue: Queue, redis_url: str, capsys: Any) -> None:
    queue_states.register_worker(queue)
    job_id = queue.enqueue("t").job_id
    # Locks no antre script would leave: one held by a job that is not processing, one without
    # a TTL (written by hand, as an operator's "quick fix" might).
    queue.redis.set(queue.keys.resource_lock("acct-9"), f"{job_id}:1", px=20_000)
    queue.redis.set(queue.keys.resource_lock("acct-0"), f"{job_id}:1")
    code, out = run(capsys, redis_url, "doctor")
    assert code == 2
    assert "CRITICAL lock_without_ttl: resource lock 'acct-0'" in out
    assert f"WARNING  orphaned_lock: resource lock 'acct-9' is held by job {job_id}" in out


def test_unreachable_redis_is_one_line(capsys: Any) -> None:
    from redis_servers import free_port
    code = cli.main(["doctor", "--redis-url", f"redis://127.0.0.1:{free_port()}/0",
                     "--sample-gap", "0"])
    assert code == cli.EXIT_UNAVAILABLE
    assert "unreachable" in capsys.readouterr().err


@pytest.mark.parametrize("entry", ["{not json", "[1, 2]", '{"pid": "x"}'])
def test_unreadable_worker_entry_is_a_finding_not_a_crash(queue: Queue, redis_url: str,
                                                          capsys: Any, entry: str) -> None:
    queue_states.register_worker(queue)
    queue.redis.set(queue.keys.worker_prefix + "odd", entry)
    queue.redis.zadd(queue.keys.workers, {"odd": queue_states.server_ms(queue)})
    code, out = run(capsys, redis_url, "inspect")
    assert code == 0
    assert "workers (1)" in out and "unreadable registry entries: odd" in out
    code, out = run(capsys, redis_url, "doctor")
    assert code == 1
    assert "WARNING  bad_worker_entry: 1 worker registry entr(y/ies) cannot be read" in out
    code, out = run(capsys, redis_url, "top", "--iterations", "1", "--interval", "0")
    assert code == 0 and "bad_worker_entry" in out


def test_odd_job_records_and_lock_keys_do_not_crash(queue: Queue, redis_url: str,
                                                    capsys: Any) -> None:
    queue_states.register_worker(queue)
    stuck = queue_states.stuck_lease(queue)
    queue.redis.hset(queue.keys.job(stuck), "attempt", "x")
    dead = queue_states.dead_letters(queue, [("E", 2)])
    queue.redis.delete(queue.keys.job(dead[0]))  # a hand-written dead record
    queue.redis.hset(queue.keys.job(dead[0]), mapping={
        "id": dead[0], "type": "send_email", "status": "dead", "last_error": "E", "died_at": "soon"})
    queue.redis.delete(queue.keys.job(dead[1]))  # a dead job whose record expired
    queue.redis.hset(queue.keys.resource_lock("weird"), "not", "a string")  # wrong key type
    code, out = run(capsys, redis_url, "inspect")
    assert code == 0
    assert f"{stuck}  resize  worker=dead-worker  attempt=0" in out
    assert "weird  job=(not a lock: wrong key type)  ttl none" in out
    code, out = run(capsys, redis_url, "doctor", "--json")
    assert code == 2
    assert {"stuck_leases", "dead_letters", "lock_without_ttl"} <= {f["code"] for f in json.loads(out)}


@pytest.mark.parametrize("flag", ["--stuck-lease", "--overdue-after", "--sample-gap",
                                  "--max-ready-age", "--stale-heartbeat"])
@pytest.mark.parametrize("value", ["nan", "inf"])
def test_non_finite_durations_are_usage_errors(redis_url: str, capsys: Any, flag: str,
                                               value: str) -> None:
    for command in ("inspect", "doctor", "top"):
        code = cli.main([command, "--redis-url", redis_url, "--queue", "q", flag, value,
                         "--iterations", "1"] if command == "top" else
                        [command, "--redis-url", redis_url, "--queue", "q", flag, value])
        assert code == cli.EXIT_USAGE, (command, flag, value)
        assert "finite" in capsys.readouterr().err
