"""The `antre api` command's configuration: env defaults and the token.

Covers: a non-integer ANTRE_API_PORT or ANTRE_API_MAX_BODY_BYTES is a usage error of `antre api`
only (every other command still parses; a setting's variable is named with its flag), the
token from the env is stripped of the trailing newline a Secret made from a file carries, and a
blank one is an error.
"""

from __future__ import annotations

import re

import pytest
from antre import api, cli, errors
from antre.commands import api as api_command


def test_bad_port_env_breaks_only_the_api_command(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ANTRE_API_PORT", "abc")
    parser = cli.build_parser()
    assert parser.parse_args(["stats", "--queue", "q"]).command == "stats"
    with pytest.raises(SystemExit) as exit_info:
        parser.parse_args(["api"])
    assert exit_info.value.code == 2


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
    assert (args.port, api_settings.max_body_bytes, api_settings.body_timeout_s,
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
