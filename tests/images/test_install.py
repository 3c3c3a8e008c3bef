"""The images' install step, reproduced without Docker: wheel -> fresh virtualenv -> --help.

As in the Dockerfiles' builder stage, the wheel is built with `pip wheel --no-deps` from a copy
of exactly the build context that .dockerignore lets through, so a file the wheel needs but the
context drops fails here as it would in `docker build`. The wheel goes into a new virtualenv
(pip --no-deps), then each image's ENTRYPOINT runs with --help from that virtualenv's bin/.

To stay fast and offline-friendly, dependencies are not downloaded: after the install, a .pth
line exposes the host interpreter's site-packages to the venv. Only the plain directory is
added (.pth files inside it are not processed), so the host's editable install of antre stays
out and `import antre` resolves to the wheel. A test checks that every requirement of the wheel
(with the operator extra for the operator image) is satisfied by what the venv sees.
"""

from __future__ import annotations

import os
import shutil
import site
import subprocess
import sys
import zipfile
from collections.abc import Iterator
from importlib import metadata
from pathlib import Path

import pytest
from packaging.requirements import Requirement

from .dockerfiles import dockerignore_allows, dockerignore_patterns

REPO_ROOT = Path(__file__).resolve().parents[2]
TIMEOUT_S = 300


def build_context(target: Path) -> None:
    """Copy the files .dockerignore lets into the build context."""
    patterns = dockerignore_patterns(REPO_ROOT / ".dockerignore")
    for path in REPO_ROOT.rglob("*"):
        relative = path.relative_to(REPO_ROOT).as_posix()
        if path.is_file() and dockerignore_allows(patterns, relative):
            (target / relative).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(path, target / relative)


def run(*args: str | Path, cwd: Path, env: dict[str, str] | None = None) -> str:
    result = subprocess.run([str(a) for a in args], capture_output=True, text=True, cwd=cwd,
                            timeout=TIMEOUT_S, check=False, env=env)
    assert result.returncode == 0, f"{' '.join(map(str, args))} failed:\n{result.stdout}\n{result.stderr}"
    return result.stdout


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    context = tmp_path_factory.mktemp("context")
    build_context(context)
    if not (context / "README.md").exists():
        # pyproject's readme; setuptools only warns without it, docker COPY would fail.
        (context / "README.md").write_text("antre\n")
    wheels = tmp_path_factory.mktemp("wheels")
    # Build isolation fetches setuptools and wheel as pyproject's build-system requires.
    run(sys.executable, "-m", "pip", "wheel", "--no-deps", "--quiet", "--wheel-dir", wheels,
        context, cwd=context)
    (built,) = wheels.glob("antre-*.whl")
    return built


@pytest.fixture(scope="module")
def venv(wheel: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    root = tmp_path_factory.mktemp("venv")
    run(sys.executable, "-m", "venv", "--without-pip", root, cwd=root)
    python = root / "bin" / "python"
    run(sys.executable, "-m", "pip", "--python", python, "install", "--no-deps", "--no-index",
        "--quiet", wheel, cwd=root)
    site_packages = Path(run(python, "-c", "import sysconfig; print(sysconfig.get_path('purelib'))",
                             cwd=root).strip())
    (site_packages / "zz_host_dependencies.pth").write_text(
        "\n".join(site.getsitepackages()) + "\n")
    yield root


def clean_env() -> dict[str, str]:
    """No PYTHONPATH from the test run, so the source tree cannot shadow the wheel."""
    env = {k: v for k, v in os.environ.items() if k not in {"PYTHONPATH", "PYTHONHOME"}}
    return env


def test_wheel_declares_both_entrypoints(wheel: Path) -> None:
    with zipfile.ZipFile(wheel) as archive:
        (entry_points,) = [n for n in archive.namelist() if n.endswith(".dist-info/entry_points.txt")]
        text = archive.read(entry_points).decode()
        names = archive.namelist()
    assert "antre = antre.cli:main" in text
    assert "antre-operator = antre_operator.__main__:main" in text
    assert any(n.startswith("antre/protocol/") and n.endswith(".lua") for n in names), (
        "the Lua scripts are package data")
    assert any(n.startswith("antre_operator/") for n in names)


def test_packages_import_from_the_wheel(venv: Path) -> None:
    out = run(venv / "bin" / "python", "-c",
              "import antre, antre_operator; print(antre.__file__); print(antre_operator.__file__)",
              cwd=venv, env=clean_env())
    for line in out.splitlines():
        assert line.startswith(str(venv)), f"imported from outside the venv: {line}"


@pytest.mark.parametrize("extras", [set(), {"operator"}], ids=["worker", "operator"])
def test_dependencies_are_satisfied(venv: Path, extras: set[str]) -> None:
    requirements = metadata.Distribution.at(
        next((venv / "lib").glob("python3*/site-packages/antre-*.dist-info"))).requires or []
    missing = []
    for line in requirements:
        req = Requirement(line)
        if req.marker and not any(req.marker.evaluate({"extra": e}) for e in extras or {""}):
            continue
        try:
            version = metadata.version(req.name)
        except metadata.PackageNotFoundError:
            missing.append(f"{req} (not installed)")
            continue
        if not req.specifier.contains(version, prereleases=True):
            missing.append(f"{req} (have {version})")
    assert not missing, "requirements the image would install but this host lacks: " + ", ".join(missing)


def test_worker_entrypoint_help(venv: Path) -> None:
    """ENTRYPOINT ["antre"] CMD ["worker"]: both the command and its subcommand answer --help."""
    out = run(venv / "bin" / "antre", "--help", cwd=venv, env=clean_env())
    for command in ("worker", "reaper"):
        assert command in out
    assert "--handlers" in run(venv / "bin" / "antre", "worker", "--help", cwd=venv, env=clean_env())


def test_operator_entrypoint_help(venv: Path) -> None:
    out = run(venv / "bin" / "antre-operator", "--help", cwd=venv, env=clean_env())
    # The flags the chart passes (templates/operator-deployment.yaml).
    for flag in ("--namespace", "--all-namespaces", "--standalone", "--peering", "--liveness"):
        assert flag in out, f"antre-operator --help does not mention {flag}"
