"""The `antre api` command's configuration: env defaults and the token.

Covers: a non-integer ANTRE_API_PORT or ANTRE_API_MAX_BODY_BYTES is a usage error of `antre api`
only (every other command still parses), the token from the env is stripped of the trailing
newline a Secret made from a file carries, and a blank one is an error.
"""

from __future__ import annotations

import pytest
from antre import api, cli, errors
from antre.commands import api as api_command


@pytest.mark.parametrize("variable", ["ANTRE_API_PORT", "ANTRE_API_MAX_BODY_BYTES"])
def test_bad_api_env_breaks_only_the_api_command(monkeypatch: pytest.MonkeyPatch,
                                                 variable: str) -> None:
    monkeypatch.setenv(variable, "abc")
    parser = cli.build_parser()
    assert parser.parse_args(["stats", "--queue", "q"]).command == "stats"
    with pytest.raises(SystemExit) as exit_info:
        parser.parse_args(["api"])
    assert exit_info.value.code == 2


def test_api_env_defaults_are_integers(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ANTRE_API_PORT", "9001")
    monkeypatch.delenv("ANTRE_API_MAX_BODY_BYTES", raising=False)
    args = cli.build_parser().parse_args(["api"])
    assert (args.port, args.max_body_bytes) == (9001, api.DEFAULT_MAX_BODY_BYTES)


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
