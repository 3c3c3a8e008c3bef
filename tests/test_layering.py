"""Layering: the protocol package ``antre`` never imports the operator or the Kubernetes client."""

from __future__ import annotations

import json
import subprocess
import sys

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
