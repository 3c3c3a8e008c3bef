"""The two Dockerfiles, checked statically (no Docker engine here).

Aspects: multi-stage on one slim Python base pinned by digest with its tag beside it (the same
in both images); every pip command either checks hashes against the image's lock file or
fetches nothing (so no version is resolved at build time); antre's wheel is built without
build isolation, from the hashed build lock, with SOURCE_DATE_EPOCH in every stage; the final
stage installs wheels only (no compilers, no build tree copied in); a numeric non-root USER;
an exec-form ENTRYPOINT that is a console script of the project ([project.scripts] in
pyproject.toml); the worker's default command is `worker`; the root .dockerignore (the build
context is the repository root) lets in exactly what the COPY instructions need and keeps
local state out.
"""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

import pytest

from .dockerfiles import Stage, copy_sources, dockerignore_allows, dockerignore_patterns, stages

REPO_ROOT = Path(__file__).resolve().parents[2]
PYPROJECT = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text())
CONSOLE_SCRIPTS = PYPROJECT["project"]["scripts"]
DOCKERIGNORE = dockerignore_patterns(REPO_ROOT / ".dockerignore")

IMAGES = {
    "worker": (REPO_ROOT / "worker_image" / "Dockerfile", "antre", ["worker"]),
    "operator": (REPO_ROOT / "operator" / "Dockerfile", "antre-operator", None),
}
LOCK_FILES = {"worker": "worker_image/requirements.txt", "operator": "operator/requirements.txt"}
BUILD_LOCK = "worker_image/build-requirements.txt"
# The tag says what it is, the digest makes it so (a tag can be pushed again).
PINNED_SLIM_PYTHON = re.compile(r"^(docker\.io/library/)?python:3\.11\.\d+-slim-bookworm"
                                r"@sha256:[a-f0-9]{64}$")
PIP_COMMAND = re.compile(r"\bpip (install|download|wheel)\b[^&;]*")
COMPILERS = re.compile(r"\b(gcc|g\+\+|clang|build-essential|make|cc)\b")


@pytest.fixture(params=sorted(IMAGES))
def image(request: pytest.FixtureRequest) -> str:
    return str(request.param)


def final(image: str) -> Stage:
    return stages(IMAGES[image][0])[-1]


def test_multi_stage_on_a_pinned_slim_python(image: str) -> None:
    found = stages(IMAGES[image][0])
    assert len(found) >= 2, "build in one stage, run in another"
    for stage in found:
        assert PINNED_SLIM_PYTHON.match(stage.base), (
            f"base {stage.base} is not a slim 3.11 pinned by tag and digest")
    assert found[0].name == "builder"


def test_both_images_share_one_base() -> None:
    bases = {stage.base for path, _, _ in IMAGES.values() for stage in stages(path)}
    assert len(bases) == 1, bases


def test_the_base_digest_says_where_it_comes_from(image: str) -> None:
    """scripts/pin_images.sh rewrites this line when it reads the digest from a registry."""
    lines = [line for line in IMAGES[image][0].read_text().splitlines()
             if line.startswith("# Base digest: ")]
    assert len(lines) == 1, lines


def test_every_pip_command_checks_hashes_or_fetches_nothing(image: str) -> None:
    runs = " && ".join(i.args for stage in stages(IMAGES[image][0]) for i in stage.all("RUN"))
    commands = [m.group(0) for m in PIP_COMMAND.finditer(runs)]
    assert len(commands) == 5, commands
    for command in commands:
        hashed = "--require-hashes" in command and "--only-binary=:all:" in command
        offline = "--no-deps" in command and ("--no-index" in command
                                              or "--no-build-isolation" in command)
        assert hashed or offline, f"resolves from an index without hashes: {command}"


def test_dependencies_come_from_the_images_lock(image: str) -> None:
    builder, final_stage = stages(IMAGES[image][0])
    copied = copy_sources(builder)
    assert LOCK_FILES[image] in copied and BUILD_LOCK in copied, copied
    runs = " ".join(i.args for i in builder.all("RUN"))
    assert "-r requirements.txt" in runs and "-r build-requirements.txt" in runs
    final_runs = " ".join(i.args for i in final_stage.all("RUN"))
    assert "--require-hashes" in final_runs and "-r /wheels/requirements.txt" in final_runs
    assert "--no-deps /wheels/antre-*.whl" in final_runs, "antre itself resolves nothing"


def test_builds_with_a_fixed_source_date(image: str) -> None:
    """The wheel's zip entries and the compiled .pyc files take SOURCE_DATE_EPOCH."""
    for stage in stages(IMAGES[image][0]):
        assert any(i.args == "SOURCE_DATE_EPOCH" for i in stage.all("ARG")), stage.name
    runs = " ".join(i.args for i in final(image).all("RUN"))
    assert "useradd" not in runs and "groupadd" not in runs, (
        "they stamp the day's date into /etc/shadow and the login logs")


def test_final_stage_installs_wheels_without_compilers(image: str) -> None:
    stage = final(image)
    runs = " ".join(i.args for i in stage.all("RUN"))
    assert not COMPILERS.search(runs), f"compiler in the final stage: {runs}"
    assert "apt-get install" not in runs
    assert "--no-index" in runs and "/wheels" in runs, "install only the builder's wheels"
    assert not copy_sources(stage), "the final stage copies nothing from the build context"


def test_runs_as_a_numeric_non_root_user(image: str) -> None:
    user = final(image).last("USER")
    assert user is not None, "no USER in the final stage: the image would run as root"
    uid, _, gid = user.args.partition(":")
    assert uid.isdigit() and int(uid) > 0, f"USER {user.args} must be a numeric non-zero UID"
    assert not gid or (gid.isdigit() and int(gid) > 0)
    assert int(uid) == 10001, "the chart and docs assume UID 10001"


def test_entrypoint_is_a_console_script(image: str) -> None:
    _, script, default_cmd = IMAGES[image]
    entrypoint = final(image).last("ENTRYPOINT")
    assert entrypoint is not None and entrypoint.exec_form() == [script], (
        "exec form, so signals reach the process")
    assert script in CONSOLE_SCRIPTS, f"{script} is not in [project.scripts]"
    cmd = final(image).last("CMD")
    assert (cmd.exec_form() if cmd else None) == default_cmd


def test_builder_builds_the_project_wheel(image: str) -> None:
    builder = stages(IMAGES[image][0])[0]
    runs = " ".join(i.args for i in builder.all("RUN"))
    assert "pip wheel --no-deps --no-build-isolation --wheel-dir /wheels ." in runs


def test_context_holds_what_copy_needs(image: str) -> None:
    for source in copy_sources(stages(IMAGES[image][0])[0]):
        assert dockerignore_allows(DOCKERIGNORE, source), f".dockerignore excludes {source}"
        if source != "README.md":  # pyproject's readme; written by the lead, see the report
            assert (REPO_ROOT / source).exists(), f"COPY source {source} does not exist"


@pytest.mark.parametrize("path", [
    ".git/HEAD", ".venv/bin/python", ".cache/helm/bin/helm", "tests/conftest.py",
    "charts/antre/values.yaml", "worker_image/antre/__pycache__/x.pyc", "bench/x.py",
])
def test_dockerignore_keeps_local_state_out(path: str) -> None:
    assert not dockerignore_allows(DOCKERIGNORE, path)


def test_dockerignore_reader() -> None:
    """The matcher follows Docker's rules for the cases used here."""
    patterns = ["*", "!src/", "**/__pycache__"]
    assert dockerignore_allows(patterns, "src/a.py")
    assert not dockerignore_allows(patterns, "src/__pycache__/a.pyc")
    assert not dockerignore_allows(patterns, "other.txt")
