"""The images' lock files: pinned, hashed, and in agreement with pyproject.toml.

Aspects: every requirement is ``name==version`` with at least one sha256 (``pip
--require-hashes`` would refuse anything else at build time; this fails sooner); wheels only;
nothing from the machine that wrote them (no index, find-links or local paths); the packages
locked "via pyproject.toml" are exactly the project's direct dependencies (with the operator
extra for the operator's file), each at a version its specifier allows; every other package is
there because a locked one needs it; both images lock shared packages at the same version, the
one tests/constraints.txt pins for the test suite; the build lock holds pyproject's
build-system requirements. That the hashes are PyPI's and the
locked set installs and satisfies every requirement is tested in test_install.py.
"""

from __future__ import annotations

import tomllib
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from .locks import Lock, read

REPO_ROOT = Path(__file__).resolve().parents[2]
PYPROJECT = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text())
LOCKS = {
    "worker": (REPO_ROOT / "worker_image" / "requirements.txt", ()),
    "operator": (REPO_ROOT / "operator" / "requirements.txt", ("operator",)),
}
BUILD_LOCK = REPO_ROOT / "worker_image" / "build-requirements.txt"
CONSTRAINTS = REPO_ROOT / "tests" / "constraints.txt"


def direct_requirements(extras: tuple[str, ...]) -> dict[str, Requirement]:
    lines = PYPROJECT["project"]["dependencies"] + [
        line for extra in extras for line in PYPROJECT["project"]["optional-dependencies"][extra]]
    return {canonicalize_name(req.name): req for req in map(Requirement, lines)}


@pytest.fixture(params=sorted(LOCKS))
def image(request: pytest.FixtureRequest) -> str:
    return str(request.param)


def lock_of(image: str) -> Lock:
    return read(LOCKS[image][0])


@pytest.mark.parametrize("path", [*(p for p, _ in LOCKS.values()), BUILD_LOCK],
                         ids=[*LOCKS, "build"])
def test_every_requirement_is_pinned_and_hashed(path: Path) -> None:
    lock = read(path)
    assert lock.packages, f"{path} locks nothing"
    assert not lock.problems, f"{path}: not a pinned, hashed requirement: {lock.problems}"
    unhashed = [name for name, locked in lock.packages.items() if not locked.hashes]
    assert not unhashed, f"{path}: no hash for {unhashed}"


@pytest.mark.parametrize("path", [*(p for p, _ in LOCKS.values()), BUILD_LOCK],
                         ids=[*LOCKS, "build"])
def test_wheels_only_and_nothing_from_the_writing_machine(path: Path) -> None:
    assert read(path).options == ["--only-binary :all:"]
    text = path.read_text()
    for leak in ("--index-url", "--extra-index-url", "--find-links", "--trusted-host",
                 "file://", "/opt/", "/home/", "/work/", "/tmp/"):
        assert leak not in text, f"{path} mentions {leak}"


def test_direct_dependencies_are_pyprojects(image: str) -> None:
    lock, direct = lock_of(image), direct_requirements(LOCKS[image][1])
    locked_direct = {name for name, locked in lock.packages.items() if "pyproject.toml" in locked.via}
    assert locked_direct == set(direct), "regenerate with scripts/pin_images.sh"
    for name, req in direct.items():
        version = lock.packages[name].version
        assert req.specifier.contains(version, prereleases=True), (
            f"{name}=={version} does not meet pyproject's {req}")


def test_every_other_package_is_needed_by_a_locked_one(image: str) -> None:
    lock = lock_of(image)
    for name, locked in lock.packages.items():
        assert locked.via, f"{name}: no '# via' line says what needs it"
        parents = locked.via - {"pyproject.toml"}
        assert parents <= set(lock.packages), f"{name} is needed by unlocked {parents}"


def test_both_images_lock_the_same_versions_and_files() -> None:
    worker, operator = lock_of("worker").packages, lock_of("operator").packages
    assert set(worker) <= set(operator), "the operator image runs antre too"
    differing = {n for n in worker if (worker[n].version, sorted(worker[n].hashes))
                 != (operator[n].version, sorted(operator[n].hashes))}
    assert not differing, f"regenerate both with scripts/pin_images.sh: {sorted(differing)}"


def test_build_lock_holds_the_build_system() -> None:
    lock = read(BUILD_LOCK)
    requires = {canonicalize_name(req.name): req
                for req in map(Requirement, PYPROJECT["build-system"]["requires"])}
    assert {name for name, locked in lock.packages.items() if "pyproject.toml" in locked.via
            } == set(requires)
    for name, req in requires.items():
        assert req.specifier.contains(lock.packages[name].version)
    for name, locked in lock.packages.items():
        assert locked.via and locked.via - {"pyproject.toml"} <= set(lock.packages), name


def test_images_ship_the_versions_the_suite_tests(image: str) -> None:
    """tests/constraints.txt pins what the test suite installs; an image built with other
    versions would run code no test ran."""
    tested = {}
    for line in CONSTRAINTS.read_text().splitlines():
        if "==" in line and not line.startswith("#"):
            name, _, version = line.partition("==")
            tested[canonicalize_name(name)] = version.strip()
    differing = {name: (locked.version, tested.get(name))
                 for name, locked in lock_of(image).packages.items()
                 if tested.get(name) != locked.version}
    assert not differing, f"(image, tests) versions differ: {differing}; run scripts/pin_images.sh"


def test_written_by_the_pin_script(image: str) -> None:
    """The header records pip-compile's command line: the options the script passes."""
    text = LOCKS[image][0].read_text()
    for option in ("--generate-hashes", "--constraint=tests/constraints.txt",
                   "--pip-args='--only-binary=:all:'",
                   f"--output-file={LOCKS[image][0].relative_to(REPO_ROOT)}"):
        assert option in text, option
