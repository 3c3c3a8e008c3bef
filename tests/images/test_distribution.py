"""Getting the software as README says: build the sdist and the wheel from the files a fresh
clone has, install the wheel (not editable) into a clean virtual environment, run `antre demo`.

Covers: `python -m build` makes both (the wheel from the sdist, so the sdist is complete); every
tracked file of both packages (Python modules, Lua scripts, py.typed, the dashboard's templates
and static files) is in the wheel and in the sdist; the clean venv installs the wheel with its
dependencies from the package index at the versions of tests/constraints.txt; its `antre demo`
runs from outside the repository and imports antre from that venv, with each package file
installed; its `antre api --dashboard` serves the pages and static files from the wheel.
"""

from __future__ import annotations

import subprocess
import sys
import tarfile
import zipfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from .virtualenvs import serving_api, user_env

REPO_ROOT = Path(__file__).resolve().parents[2]
PACKAGE_DIRS = {"worker_image/": "antre/", "operator/": "antre_operator/"}
TIMEOUT_S = 600


def run(*args: str | Path, cwd: Path, env: dict[str, str] | None = None) -> str:
    result = subprocess.run([str(a) for a in args], capture_output=True, text=True, cwd=cwd,
                            timeout=TIMEOUT_S, check=False, env=env)
    assert result.returncode == 0, f"{' '.join(map(str, args))}:\n{result.stdout}\n{result.stderr}"
    return result.stdout


def tracked_files() -> list[str]:
    return run("git", "ls-files", cwd=REPO_ROOT).splitlines()


def package_files() -> set[str]:
    """Tracked files of both packages, as paths inside the wheel (antre/..., antre_operator/...)."""
    found = set()
    for path in tracked_files():
        for source, installed in PACKAGE_DIRS.items():
            if path.startswith(source + installed):
                found.add(path[len(source):])
    return found


@pytest.fixture(scope="module")
def dist(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """sdist and wheel built from a copy of the tracked files (what a fresh clone holds)."""
    clone = tmp_path_factory.mktemp("clone")
    for path in tracked_files():
        target = clone / path
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes((REPO_ROOT / path).read_bytes())
    out = tmp_path_factory.mktemp("dist")
    run(sys.executable, "-m", "build", "--outdir", out, clone, cwd=clone)
    return out


@pytest.fixture(scope="module")
def clean_venv(dist: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    root = tmp_path_factory.mktemp("venv")
    run(sys.executable, "-m", "venv", root, cwd=root)
    (wheel,) = dist.glob("antre-*.whl")
    run(root / "bin" / "python", "-m", "pip", "install", "--quiet", "--disable-pip-version-check",
        "-c", REPO_ROOT / "tests" / "constraints.txt", wheel, cwd=root)
    yield root


def test_wheel_and_sdist_hold_every_package_file(dist: Path) -> None:
    (wheel,) = dist.glob("antre-*.whl")
    (sdist,) = dist.glob("antre-*.tar.gz")
    expected = package_files()
    assert any(name.endswith(".lua") for name in expected) and "antre/py.typed" in expected
    assert {"antre/dashboard/templates/base.html", "antre/dashboard/static/dashboard.js",
            "antre/dashboard/templates/fragments/queues.html"} <= expected
    with zipfile.ZipFile(wheel) as archive:
        in_wheel = set(archive.namelist())
    assert expected - in_wheel == set(), "package files missing from the wheel"
    with tarfile.open(sdist) as archive:
        in_sdist = {name.split("/", 1)[1] for name in archive.getnames() if "/" in name}
    sources = {source + name for name in expected for source, installed in PACKAGE_DIRS.items()
               if name.startswith(installed)}
    assert sources | {"pyproject.toml", "README.md"} <= in_sdist, "files missing from the sdist"


def test_clean_venv_runs_the_demo_from_the_wheel(clean_venv: Path, tmp_path: Path) -> None:
    proc = subprocess.run([clean_venv / "bin" / "antre", "demo", "--jobs", "200"], cwd=tmp_path,
                          env=user_env(), capture_output=True, text=True, timeout=TIMEOUT_S,
                          check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "started a throwaway redis-server" in proc.stdout
    [final] = [line for line in proc.stdout.splitlines() if line.startswith("final stats:")]
    assert "'done': 198, 'dead': 2" in final, proc.stdout  # every 10th is a report, 2 broken


def test_clean_venv_imports_antre_from_its_own_files(clean_venv: Path, tmp_path: Path) -> None:
    out = run(clean_venv / "bin" / "python", "-c",
              "import antre, importlib.metadata as m; print(antre.__file__); "
              "print('\\n'.join(str(f) for f in m.files('antre')))", cwd=tmp_path, env=user_env())
    location, *installed = out.splitlines()
    assert location.startswith(str(clean_venv)), f"antre imported from {location}"
    assert package_files() - set(installed) == set(), "package files the install left out"


def test_clean_venv_serves_the_dashboard_from_the_wheel(clean_venv: Path, tmp_path: Path,
                                                        redis_url: str) -> None:
    import requests
    from redis_servers import wait_until

    with serving_api(clean_venv, redis_url, "wheel", tmp_path) as (base, process):
        page = wait_until(lambda: requests.get(base + "/ui/", timeout=2), timeout_s=30,
                          message="the dashboard from the wheel")
        assert page.status_code == 200 and "<h1>Queues</h1>" in page.text
        assert 'data-queue="wheel"' in page.text
        script = page.text.split('<script src="', 1)[1].split('"', 1)[0]
        assert requests.get(base + script, timeout=5).text.startswith("// antre dashboard")
    process.communicate(timeout=10)
