"""The images' install step, reproduced without Docker: from the lock files, as the
Dockerfiles do it, into a fresh virtualenv, then the entrypoints.

Aspects: every file the three lock files name is downloaded with ``pip download
--require-hashes --only-binary=:all:``, so each hash is checked against the file PyPI serves
for this machine's platform (Linux, CPython 3.11: the images' own). antre's wheel is built as
the builder stage builds it: from a copy of exactly the build context .dockerignore lets
through (a file the wheel needs but the context drops fails here as in `docker build`), in a
virtualenv holding only the hashed build lock, with ``--no-build-isolation``; two builds from
sources whose files carry different times give the same bytes (SOURCE_DATE_EPOCH). The wheel
declares both entrypoints and carries the Lua scripts. The operator's lock (a superset of the
worker's with the same versions and hashes, see test_locks.py) goes into a fresh virtualenv
with ``--no-index --require-hashes`` and antre with ``--no-deps``: every requirement of antre,
extras included, is then met, with the operator extra by that lock and without it by the
worker's lock alone, and ``pip check`` agrees; antre and antre_operator import from that
virtualenv, and each image's ENTRYPOINT answers --help there with what the chart and the
operator pass it.

This needs PyPI, as building the images does; pip's cache makes a second run quick. The
virtualenvs skip compiling .pyc files (--no-compile) to keep the test short.
"""

from __future__ import annotations

import hashlib
import os
import zipfile
from importlib import metadata
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from .dockerfiles import build_context
from .locks import read
from .virtualenvs import new_venv, pip, pip_env, run

REPO_ROOT = Path(__file__).resolve().parents[2]
WORKER_LOCK = REPO_ROOT / "worker_image" / "requirements.txt"
OPERATOR_LOCK = REPO_ROOT / "operator" / "requirements.txt"
BUILD_LOCK = REPO_ROOT / "worker_image" / "build-requirements.txt"
SOURCE_DATE_EPOCH = "315532800"  # the Dockerfiles' default


def install_locked(python: Path, wheelhouse: Path, lock: Path) -> None:
    pip("--python", python, "install", "--no-index", "--find-links", wheelhouse,
        "--require-hashes", "--only-binary=:all:", "--no-deps", "--no-compile", "-r", lock)


@pytest.fixture(scope="module")
def wheelhouse(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Every locked file, each checked against its hash (the worker's lock holds the same
    lines as the operator's for its packages: test_locks.py)."""
    directory = tmp_path_factory.mktemp("wheelhouse")
    for lock in (OPERATOR_LOCK, BUILD_LOCK):
        pip("download", "--require-hashes", "--only-binary=:all:", "--no-deps",
            "--dest", directory, "-r", lock)
    return directory


@pytest.fixture(scope="module")
def antre_wheels(wheelhouse: Path, tmp_path_factory: pytest.TempPathFactory) -> list[Path]:
    """The builder stage's `pip wheel --no-deps --no-build-isolation .` with only the hashed
    build lock installed, twice, from contexts whose files carry different times."""
    root = tmp_path_factory.mktemp("build")
    python = new_venv(root / "venv")
    install_locked(python, wheelhouse, BUILD_LOCK)
    wheels = []
    for file_time in (1_000_000_000, 1_700_000_000):
        context = root / f"context-{file_time}"
        build_context(REPO_ROOT, context)
        if not (context / "README.md").exists():
            (context / "README.md").write_text("antre\n")  # pyproject's readme
        for path in context.rglob("*"):
            os.utime(path, (file_time, file_time))
        out = root / f"wheels-{file_time}"
        pip("--python", python, "wheel", "--no-deps", "--no-build-isolation", "--wheel-dir",
            out, context, env={**pip_env(), "SOURCE_DATE_EPOCH": SOURCE_DATE_EPOCH})
        wheels += list(out.glob("antre-*.whl"))
    return wheels


def test_a_rebuild_of_antres_wheel_gives_the_same_bytes(antre_wheels: list[Path]) -> None:
    first, second = (hashlib.sha256(w.read_bytes()).hexdigest() for w in antre_wheels)
    assert first == second


@pytest.fixture(scope="module")
def operator_venv(wheelhouse: Path, antre_wheels: list[Path],
                  tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("operator-venv")
    python = new_venv(root)
    install_locked(python, wheelhouse, OPERATOR_LOCK)
    pip("--python", python, "install", "--no-index", "--no-deps", "--no-compile",
        antre_wheels[0])
    return root


def unmet_requirements(root: Path, extras: set[str], allowed: dict[str, str]) -> list[str]:
    """Walk antre's requirements (with ``extras``) and theirs, extras included, through the
    distributions installed in the virtualenv at ``root``; each one reached must be installed
    at a version its requirement allows and listed in ``allowed`` (name -> locked version)."""
    (site_packages,) = (root / "lib").glob("python3*/site-packages")
    installed = {canonicalize_name(d.metadata["Name"]): d
                 for d in metadata.distributions(path=[str(site_packages)])}
    unmet: list[str] = []
    seen: set[tuple[str, frozenset[str]]] = set()
    todo = [("antre", frozenset(extras))]
    while todo:
        name, wanted = todo.pop()
        if (name, wanted) in seen:
            continue
        seen.add((name, wanted))
        for line in installed[name].requires or []:
            req = Requirement(line)
            if req.marker and not any(req.marker.evaluate({"extra": e})
                                      for e in (wanted or {""})):
                continue
            dependency = canonicalize_name(req.name)
            if dependency not in installed:
                unmet.append(f"{name} needs {req}: not installed")
            elif not req.specifier.contains(installed[dependency].version, prereleases=True):
                unmet.append(f"{name} needs {req}: {installed[dependency].version} installed")
            elif allowed.get(dependency) != installed[dependency].version:
                unmet.append(f"{name} needs {req}: not in this image's lock")
            else:
                todo.append((dependency, frozenset(req.extras)))
    return unmet


@pytest.mark.parametrize(("lock", "extras"), [
    pytest.param(WORKER_LOCK, set(), id="worker"),
    pytest.param(OPERATOR_LOCK, {"operator"}, id="operator"),
])
def test_the_lock_meets_every_requirement(operator_venv: Path, lock: Path,
                                          extras: set[str]) -> None:
    allowed = {name: locked.version for name, locked in read(lock).packages.items()}
    assert not unmet_requirements(operator_venv, extras, allowed)


def test_pip_check_agrees(operator_venv: Path) -> None:
    assert "No broken requirements found" in pip("--python", operator_venv / "bin" / "python",
                                                 "check")


def test_wheel_declares_both_entrypoints(antre_wheels: list[Path]) -> None:
    with zipfile.ZipFile(antre_wheels[0]) as archive:
        names = archive.namelist()
        (entry_points,) = [n for n in names if n.endswith(".dist-info/entry_points.txt")]
        text = archive.read(entry_points).decode()
    assert "antre = antre.cli:main" in text
    assert "antre-operator = antre_operator.__main__:main" in text
    assert any(n.startswith("antre/protocol/") and n.endswith(".lua") for n in names), (
        "the Lua scripts are package data")
    assert any(n.startswith("antre_operator/") for n in names)


def test_packages_import_from_the_venv(operator_venv: Path) -> None:
    out = run(operator_venv / "bin" / "python", "-c",
              "import antre, antre_operator; print(antre.__file__); print(antre_operator.__file__)")
    for line in out.splitlines():
        assert line.startswith(str(operator_venv)), f"imported from outside the venv: {line}"


def test_worker_entrypoint_help(operator_venv: Path) -> None:
    """ENTRYPOINT ["antre"] CMD ["worker"]: the command and its subcommands answer --help."""
    out = run(operator_venv / "bin" / "antre", "--help")
    for command in ("worker", "reaper", "api"):
        assert command in out
    assert "--handlers" in run(operator_venv / "bin" / "antre", "worker", "--help")


def test_operator_entrypoint_help(operator_venv: Path) -> None:
    out = run(operator_venv / "bin" / "antre-operator", "--help")
    # The flags the chart passes (templates/operator-deployment.yaml).
    for flag in ("--namespace", "--all-namespaces", "--standalone", "--peering", "--liveness",
                 "--metrics-port"):
        assert flag in out, f"antre-operator --help does not mention {flag}"
