"""Layering: the import contracts of pyproject.toml ([tool.importlinter]) hold, checked with
import-linter as kopf checks its own: protocol below the background loops, those below the
worker and the client, those below the HTTP API, the commands and the command line; ``antre``
never imports the operator, kopf or the Kubernetes client; no import circles between the
modules of a package. Also at run time: importing ``antre``'s entry points loads none of the
operator's packages."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

FORBIDDEN = ("kopf", "kubernetes", "antre_operator")
MODULES = ["antre", "antre.cli", "antre.worker", "antre.commands.demo", "antre.client",
           "antre.metrics_server"]


def test_antre_does_not_import_operator_side_packages():
    code = (
        "import importlib, json, sys\n"
        f"for name in {MODULES!r}: importlib.import_module(name)\n"
        "import antre.cli; antre.cli.build_parser()\n"
        "print(json.dumps(sorted(sys.modules)))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    loaded = json.loads(out.stdout)
    leaked = [m for m in loaded if m.split(".")[0] in FORBIDDEN]
    assert leaked == []


REPO_ROOT = Path(__file__).resolve().parent.parent


def test_import_contracts_are_kept():
    lint_imports = Path(sys.executable).parent / "lint-imports"
    out = subprocess.run([str(lint_imports), "--config", str(REPO_ROOT / "pyproject.toml"),
                          "--no-cache"], capture_output=True, text=True, cwd=REPO_ROOT,
                         timeout=120, check=False)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "Contracts: 3 kept, 0 broken." in out.stdout


def test_the_dashboard_sits_above_the_library():
    """Workers, producers and the protocol never load the dashboard (or its template engine);
    only the API that serves it does."""
    code = (
        "import json, sys\n"
        "import antre, antre.worker, antre.client, antre.snapshots, antre.findings\n"
        "print(json.dumps(sorted(sys.modules)))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    loaded = json.loads(out.stdout)
    assert [m for m in loaded if m.startswith(("antre.dashboard", "jinja2"))] == []
