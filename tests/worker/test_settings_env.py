"""The ANTRE_* variables the Kubernetes manifests set reach the settings, and bad values are
named with what is allowed."""

from __future__ import annotations

import pytest
from antre import cli, errors, settings
from antre.commands import worker as worker_command


def test_queue_settings_from_env() -> None:
    env = {"ANTRE_QUEUE": "mail", "ANTRE_PREFIX": "acme", "ANTRE_MAX_ATTEMPTS": "3",
           "ANTRE_DONE_TTL": "0", "ANTRE_IDEMPOTENCY_TTL": "60",
           "ANTRE_IDEMPOTENCY_DONE_TTL": "120.5", "ANTRE_MAX_PAYLOAD_BYTES": "1000"}
    assert settings.queue_settings_from_env(env) == settings.QueueSettings(
        name="mail", prefix="acme", max_attempts=3, done_ttl_s=0, idempotency_ttl_s=60,
        idempotency_done_ttl_s=120.5, max_payload_bytes=1000)


@pytest.mark.parametrize(("env", "message"), [
    pytest.param({"ANTRE_DONE_TTL": "soon"}, "ANTRE_DONE_TTL: got 'soon'; must be a number",
                 id="not-a-number"),
    pytest.param({"ANTRE_MAX_ATTEMPTS": "2.5"}, "ANTRE_MAX_ATTEMPTS: got '2.5'; must be an integer",
                 id="not-an-integer"),
    pytest.param({"ANTRE_IDEMPOTENCY_TTL": "0"}, "idempotency_ttl_s: got 0.0; must be a number >= 0.001",
                 id="zero-ttl"),
    pytest.param({"ANTRE_QUEUE": "a:b"}, "queue: got 'a:b'", id="bad-queue"),
])
def test_bad_env_values_are_named(env: dict[str, str], message: str) -> None:
    with pytest.raises(errors.InvalidArgument, match=message.replace(".", r"\.").replace("(", r"\(")):
        settings.queue_settings_from_env(env)


def test_worker_flags_reach_the_worker_settings() -> None:
    args = cli.build_parser().parse_args([
        "worker", "--concurrency", "8", "--visibility-timeout", "12", "--job-timeout", "5",
        "--grace-period", "3", "--reaper-interval", "0.5", "--lock-defer", "0.1",
        "--lock-max-deferrals", "7", "--backoff-base", "0.5", "--backoff-max", "9"])
    worker = worker_command.worker_settings_from_args(args)
    assert (worker.concurrency, worker.visibility_timeout_s, worker.job_timeout_s,
            worker.grace_period_s, worker.reaper_interval_s, worker.lock_defer_s,
            worker.lock_max_deferrals, worker.backoff.base_s, worker.backoff.max_s) == (
        8, 12, 5, 3, 0.5, 0.1, 7, 0.5, 9)


def test_queue_settings_from_env_classmethod(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ANTRE_MAX_ATTEMPTS", "7")
    assert settings.QueueSettings.from_env(name="mail").max_attempts == 7
    assert settings.QueueSettings.from_env({"ANTRE_MAX_ATTEMPTS": "2"}).max_attempts == 2
