"""The two Dockerfiles, checked statically (no Docker engine here).

Aspects: multi-stage with a pinned slim Python base; the final stage installs wheels only (no
compilers, no build tree copied in); a numeric non-root USER; an exec-form ENTRYPOINT that is a
console script of the project ([project.scripts] in pyproject.toml); the worker's default
command is `worker`; the root .dockerignore (the build context is the repository root) lets in
exactly what the COPY instructions need and keeps local state out.
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
PINNED_SLIM_PYTHON = re.compile(r"^(docker\.io/library/)?python:3\.11\.\d+-slim(-bookworm)?"
                                r"(@sha256:[a-f0-9]{64})?$")
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
        assert PINNED_SLIM_PYTHON.match(stage.base), f"base {stage.base} is not a pinned slim 3.11"
    assert found[0].name == "builder"


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
    assert "pip wheel --no-deps --wheel-dir /wheels ." in runs
    if image == "operator":
        assert "[operator]" in runs, "the operator image needs antre[operator]'s dependencies"


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
