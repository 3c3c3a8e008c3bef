"""``python -m antre_operator.uninstall``'s arguments: a timeout that bounds nothing is refused.

Aspects: --timeout must be a positive, finite number of seconds (nan and inf would pass a
``<= 0`` check, and the wait would never reach its deadline: a hook that never ends by itself);
a refusal is argparse's one line and exit 2 (EXIT_USAGE, which the chart's Job fails at once on:
another pod gets the same arguments). The program on a real API server is in
tests/e2e/test_uninstall_command.py.
"""

from __future__ import annotations

import pytest
from antre_operator import uninstall

ARGS = ["--namespace=ns", "--name=example"]


@pytest.mark.parametrize("timeout", ["0", "-1", "nan", "inf", "-inf"])
def test_a_timeout_that_bounds_nothing_is_refused(timeout: str,
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        uninstall.parse_args([*ARGS, f"--timeout={timeout}"])
    assert exited.value.code == uninstall.EXIT_USAGE == 2
    assert capsys.readouterr().err.splitlines()[-1].endswith(
        "--timeout must be a positive number of seconds")


def test_a_finite_timeout_is_kept() -> None:
    assert uninstall.parse_args([*ARGS, "--timeout=0.5"]).timeout == 0.5
    assert uninstall.parse_args(ARGS).timeout == 120
