"""README's test command, `.ci/run` and the pinned test tools agree.

Aspects: README's second line runs scripts/test.sh, which .ci/run runs too; scripts/test.sh
installs with tests/constraints.txt; the constraints pin every test tool named in the `test`
extra to one exact version; and the running environment has exactly those versions (so a
passing local run means the pins are the ones tested).
"""

from __future__ import annotations

import re
import tomllib
from importlib import metadata
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent


def pins() -> dict[str, str]:
    lines = (REPO_ROOT / "tests" / "constraints.txt").read_text().splitlines()
    found = (re.fullmatch(r"([A-Za-z0-9_.\-]+)==(\S+)", line.strip()) for line in lines
             if line.strip() and not line.startswith("#"))
    return {canonical(m.group(1)): m.group(2) for m in found if m}


def canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def test_readme_and_ci_run_the_same_script() -> None:
    readme_commands = (REPO_ROOT / "README.md").read_text().split("```", 2)[1]
    assert "bash scripts/test.sh" in readme_commands
    assert "bash scripts/test.sh" in (REPO_ROOT / ".ci" / "run").read_text()
    assert "-c tests/constraints.txt" in (REPO_ROOT / "scripts" / "test.sh").read_text()


def test_every_test_tool_is_pinned_and_installed_at_its_pin() -> None:
    extra = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text())[
        "project"]["optional-dependencies"]["test"]
    tools = {canonical(re.split(r"[<>=\[ ;]", req, maxsplit=1)[0]) for req in extra}
    tools.discard("antre")
    pinned = pins()
    assert tools - pinned.keys() == set(), "test tools without a pin in tests/constraints.txt"
    mismatched = {name: (pinned[name], metadata.version(name)) for name in tools
                  if metadata.version(name) != pinned[name]}
    assert mismatched == {}, "installed versions differ from tests/constraints.txt (pin, installed)"
