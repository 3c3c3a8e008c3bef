"""The `antre api` command's configuration: env defaults and the token.

Covers: a non-integer ANTRE_API_PORT or ANTRE_API_MAX_BODY_BYTES is a one-line error of `antre api`
only (every other command still parses; a setting's variable is named with its flag), the
token from the env is stripped of the trailing newline a Secret made from a file carries, and a
blank one, or one that is not UTF-8 text, is an error at start.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest
from antre import api, cli, errors
from antre.commands import EXIT_UNAVAILABLE, EXIT_USAGE
from antre.commands import api as api_command
from redis_servers import child_env, free_port

ANTRE = str(Path(sys.executable).parent / "antre")


@pytest.mark.parametrize(("value", "message"), [
    pytest.param("abc", "got 'abc'; must be an integer", id="not-a-number"),
    pytest.param("70000", "got 70000; must be an integer from 0 to 65535", id="out-of-range"),
])
def test_bad_port_env_breaks_only_the_api_command(value: str, message: str) -> None:
    """One line naming the flag and the variable (the user may never have typed --port)."""
    env = {**child_env(), "ANTRE_API_PORT": value, "ANTRE_API_TOKEN": "t0ken",
           "ANTRE_REDIS_URL": f"redis://127.0.0.1:{free_port()}/0"}
    other = subprocess.run([ANTRE, "stats"], env=env, capture_output=True, text=True, timeout=60)
    assert other.returncode == EXIT_UNAVAILABLE  # parsed, then Redis is not there: not usage
    proc = subprocess.run([ANTRE, "api"], env=env, capture_output=True, text=True, timeout=60)
    assert (proc.returncode, proc.stderr) == (
        EXIT_USAGE, f"antre api: --port (env ANTRE_API_PORT): {message}\n")


def test_bad_settings_env_names_the_flag_and_the_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ANTRE_API_MAX_BODY_BYTES", "abc")
    monkeypatch.setenv("ANTRE_API_TOKEN", "t0ken")
    parser = cli.build_parser()
    assert parser.parse_args(["stats", "--queue", "q"]).command == "stats"
    with pytest.raises(errors.InvalidArgument, match=re.escape(
            "--max-body-bytes (env ANTRE_API_MAX_BODY_BYTES): got 'abc'; must be an integer")):
        api_command.api_settings_from_args(parser.parse_args(["api"]))


def test_api_env_defaults(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ANTRE_API_PORT", "9001")
    monkeypatch.setenv("ANTRE_API_TOKEN", "t0ken")
    monkeypatch.setenv("ANTRE_API_BODY_TIMEOUT", "2.5")
    monkeypatch.delenv("ANTRE_API_MAX_BODY_BYTES", raising=False)
    args = cli.build_parser().parse_args(["api", "--queue", "emails"])
    api_settings = api_command.api_settings_from_args(args)
    assert (api_settings.port, api_settings.max_body_bytes, api_settings.body_timeout_s,
            api_settings.queues) == (9001, api.DEFAULT_MAX_BODY_BYTES, 2.5, ("emails",))


@pytest.mark.parametrize(("value", "token"), [("s3cret\n", "s3cret"), (" s3cret ", "s3cret")])
def test_token_from_env_is_stripped(monkeypatch: pytest.MonkeyPatch, value: str,
                                    token: str | None) -> None:
    monkeypatch.setenv("ANTRE_API_TOKEN", value)
    assert api_command.token_from_env() == token


@pytest.mark.parametrize("value", ["", "\n", "   "])
def test_a_blank_token_is_an_error_not_no_auth(monkeypatch: pytest.MonkeyPatch, value: str) -> None:
    monkeypatch.setenv("ANTRE_API_TOKEN", value)
    with pytest.raises(errors.InvalidArgument, match="ANTRE_API_TOKEN: set but empty"):
        api_command.token_from_env()


def test_a_token_that_is_not_utf8_text_is_refused_at_start() -> None:
    """A Secret made from `openssl rand 32 > token` holds raw bytes no client can send in a
    header: one line at start, not a 500 on every request."""
    env = {**child_env(), "ANTRE_API_TOKEN": b"raw-\xff\xfe", "ANTRE_API_PORT": "0",
           "ANTRE_REDIS_URL": f"redis://127.0.0.1:{free_port()}/0"}
    proc = subprocess.run([ANTRE, "api"], env=env, capture_output=True, text=True, timeout=60)
    assert proc.returncode == EXIT_USAGE, proc.stderr
    assert proc.stderr.splitlines() == [
        "antre api: ANTRE_API_TOKEN: not UTF-8 text (byte 0xff at position 4); use a text "
        "token, e.g. openssl rand -hex 32"]
