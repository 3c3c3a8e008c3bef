"""The ANTRE_* variables the Kubernetes manifests set reach the settings, and bad values are
named with what is allowed. Each setting is declared once (antre.fields): the flags, from_env,
the operator's env entries and the docs tables are derived from the declaration, and no other
module spells a setting's variable."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from antre import api, cli, errors, fields, settings
from antre.backoff import Backoff
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
    pytest.param({"ANTRE_IDEMPOTENCY_TTL": "0"},
                 "idempotency_ttl_s: got 0.0; must be a number from 0.001 to 315360000",
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


REPO_ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize(("doc", "classes"), [
    pytest.param("README.md", (settings.QueueSettings, settings.WorkerSettings), id="readme"),
    pytest.param("docs/api.md", (api.ApiSettings,), id="api"),
])
def test_docs_tables_are_the_derived_rows(doc: str, classes: tuple[type, ...]) -> None:
    """Regenerate with `python scripts/settings_tables.py` after changing a declaration."""
    text = (REPO_ROOT / doc).read_text()
    missing = [row for cls in classes for row in fields.markdown_rows(cls) if row not in text]
    assert missing == []


def test_every_variable_named_in_the_code_is_declared_once() -> None:
    """The ANTRE_* names of settings appear as literals only in their declaration."""
    declared = [item.spec.env for cls in (settings.QueueSettings, settings.WorkerSettings,
                                          api.ApiSettings)
                for item in fields.entries(cls) if item.spec.env]
    assert len(declared) == len(set(declared))
    # POD_NAME is not ours: the pod's name from the downward API, which the operator maps and
    # the worker falls back to when built without settings from the environment.
    declared.remove("POD_NAME")
    sources = {path: path.read_text() for root in ("worker_image/antre", "operator/antre_operator")
               for path in (REPO_ROOT / root).rglob("*.py")}
    repeated = {(name, str(path.relative_to(REPO_ROOT))) for name in declared
                for path, text in sources.items()
                if f'"{name}"' in text and path.name not in ("settings.py", "backoff.py", "api.py")}
    assert repeated == set()


def test_worker_settings_from_env_match_the_flags() -> None:
    env = {"ANTRE_CONCURRENCY": "8", "ANTRE_BACKOFF_BASE": "600", "ANTRE_JOB_TIMEOUT": "2.5"}
    from_env = settings.WorkerSettings.from_env(env)
    assert (from_env.concurrency, from_env.job_timeout_s, from_env.backoff) == (
        8, 2.5, Backoff(base_s=600, max_s=600))  # a base above the default cap raises the cap
    args = cli.build_parser().parse_args(["worker", "--concurrency", "8", "--backoff-base", "600",
                                          "--job-timeout", "2.5"])
    assert worker_command.worker_settings_from_args(args) == from_env


@pytest.mark.parametrize(("values", "message"), [
    pytest.param({"concurrency": 0}, "concurrency: got 0; must be an integer from 1 to 10000",
                 id="below"),
    pytest.param({"concurrency": 2.5}, "concurrency: got 2.5; must be an integer", id="not-int"),
    pytest.param({"concurrency": True}, "concurrency: got True; must be an integer", id="bool"),
    pytest.param({"job_timeout_s": float("nan")}, "job_timeout_s: got nan; must be a number",
                 id="nan"),
    pytest.param({"metrics_port": 70000}, "metrics_port: got 70000; must be an integer from 0 "
                 "to 65535", id="above"),
])
def test_declared_bounds_are_enforced(values: dict[str, object], message: str) -> None:
    with pytest.raises(errors.InvalidArgument, match=re.escape(message)):
        settings.WorkerSettings(**values)  # type: ignore[arg-type]


def test_operator_env_entries_come_from_the_declarations() -> None:
    assert fields.env_entries(settings.WorkerSettings, {
        "concurrency": 4, "backoff.base_s": 1.0, "job_timeout_s": None}) == [
        {"name": "ANTRE_CONCURRENCY", "value": "4"}, {"name": "ANTRE_BACKOFF_BASE", "value": "1"}]
