"""Every duration and count setting has an upper bound, and no setting takes a non-finite
number: ``inf`` (or ``nan``) in a variable or a flag is refused at start with one line naming
it, the value and what is allowed, instead of an OverflowError later (at a cancel, in a reaper
pass, inside a worker's claim loop) or a body timeout that never fires."""

from __future__ import annotations

import math
import shutil
import subprocess
import sys

import pytest
from antre import api, errors, fields, settings
from antre.backoff import Backoff
from antre.commands import EXIT_USAGE
from antre.dashboard.state import DashboardSettings
from redis_servers import child_env, free_port

ANTRE = [shutil.which("antre")] if shutil.which("antre") else [sys.executable, "-m", "antre"]
CLASSES = (settings.QueueSettings, settings.WorkerSettings, Backoff, api.ApiSettings,
           DashboardSettings)
NUMERIC = [pytest.param(cls, item, id=f"{cls.__name__}.{item.path}")
           for cls in CLASSES for item in fields.entries(cls) if item.kind in (int, float)]


@pytest.mark.parametrize(("cls", "item"), NUMERIC)
def test_every_number_setting_has_an_upper_bound(cls: type, item: fields.Entry) -> None:
    assert item.spec.maximum is not None and math.isfinite(item.spec.maximum)
    assert fields.violates(item, item.spec.maximum + 1)


@pytest.mark.parametrize(("cls", "item"), [p for p in NUMERIC if p.values[1].kind is float])
@pytest.mark.parametrize("value", [math.inf, -math.inf, math.nan])
def test_non_finite_numbers_are_refused(cls: type, item: fields.Entry, value: float) -> None:
    with pytest.raises(errors.InvalidArgument, match=r"got -?(inf|nan); must be a number"):
        fields.check_value(item, value)


def run(*args: str, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*ANTRE, *args], env={**child_env(), **env}, capture_output=True,
                          text=True, timeout=60)


@pytest.mark.parametrize(("command", "env", "line"), [
    pytest.param(["cancel", "0123456789abcdef0123456789a"], {"ANTRE_DONE_TTL": "inf"},
                 "antre cancel: done_ttl_s: got inf; must be a number from 0 to 315360000",
                 id="done-ttl"),
    pytest.param(["reaper", "--once"], {"ANTRE_DEAD_TTL": "Infinity"},
                 "antre reaper: dead_ttl_s: got inf; must be a number from 0 to 315360000",
                 id="dead-ttl"),
    pytest.param(["enqueue", "t", "{}"], {"ANTRE_DURABLE_TIMEOUT": "inf"},
                 "antre enqueue: durable_timeout_s: got inf; must be a number from 0.001 to 60",
                 id="durable-timeout"),
    pytest.param(["reaper", "--interval", "inf"], {},
                 "antre reaper: --interval: got inf; must be a number of seconds > 0 and <= 86400",
                 id="reaper-interval"),
    pytest.param(["worker", "--handlers", "antre.example_handlers"], {"ANTRE_DONE_TTL": "inf"},
                 "antre worker: done_ttl_s: got inf; must be a number from 0 to 315360000",
                 id="worker-done-ttl"),
    pytest.param(["worker", "--handlers", "antre.example_handlers", "--grace-period", "1e9"], {},
                 "antre worker: --grace-period (env ANTRE_GRACE_PERIOD): got 1000000000.0; must be a "
                 "number from 0 to 86400", id="worker-grace-beyond-a-day"),
    pytest.param(["api", "--body-timeout", "inf"], {"ANTRE_API_TOKEN": "t0ken"},
                 "antre api: --body-timeout (env ANTRE_API_BODY_TIMEOUT): got inf; must be a "
                 "number > 0 and <= 86400", id="api-body-timeout"),
])
def test_the_commands_refuse_non_finite_and_huge_settings(redis_url: str, command: list[str],
                                                           env: dict[str, str], line: str) -> None:
    proc = run(*command, "--redis-url", redis_url, "--queue", "bounds",
               *(["--port", str(free_port()), "--host", "127.0.0.1"] if command[0] == "api"
                 else []), **env)
    assert (proc.returncode, proc.stderr) == (EXIT_USAGE, line + "\n")
