"""The shipped examples and the module layering.

Aspects: every example JobQueue is parsed by the operator and renders valid Kubernetes
manifests (the API server's own verdict on the examples is in tests/e2e/test_crd.py); the pure
modules (spec, rendering, scaling, status) import neither kopf, nor a Kubernetes client, nor
Redis; only kube.py talks HTTP to the API server; the antre package never imports the operator.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import kubernetes_validate
import pytest
import yaml
from antre_operator import rendering
from operator_samples import ROOT, parse

EXAMPLES = sorted((ROOT / "examples").glob("jobqueue*.yaml"))
PACKAGE = ROOT / "operator" / "antre_operator"
PURE = ("spec", "rendering", "scaling", "status", "settings", "policy")
IO_MODULES = {"kopf", "kubernetes", "aiohttp", "redis", "antre", "prometheus_client"}


@pytest.mark.parametrize("path", EXAMPLES, ids=[p.name for p in EXAMPLES])
def test_examples_parse_and_render(path: Path) -> None:
    body = yaml.safe_load(path.read_text())
    body["metadata"].setdefault("namespace", "default")
    jq = parse(body)
    for manifest in rendering.render_children(jq, "uid-1", replicas=2).present:
        kubernetes_validate.validate(manifest, "1.30", strict=True)


def imported_roots(path: Path) -> set[str]:
    roots = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            roots |= {alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            if node.module == "antre" and {a.name for a in node.names} <= {
                    "keys", "fields", "errors", "sentinel_urls", "redis_urls"}:
                continue  # key builders, name patterns, setting declarations, errors, URL
                # parsing and checks: pure, no I/O
            if node.module == "antre.settings":
                continue  # the settings' declarations (env names): pure, no I/O
            roots.add(node.module.split(".")[0])
    return roots


@pytest.mark.parametrize("module", PURE)
def test_pure_modules_do_no_io(module: str) -> None:
    assert not imported_roots(PACKAGE / f"{module}.py") & IO_MODULES


def test_only_kube_speaks_http_to_the_api_server() -> None:
    users = {p.stem for p in PACKAGE.glob("*.py") if "aiohttp" in imported_roots(p)}
    assert users == {"kube"}


def test_antre_does_not_import_the_operator() -> None:
    code = ("import sys, antre, antre.client, antre.cli; "
            "bad = [m for m in sys.modules if m.split('.')[0] in ('kopf', 'antre_operator')]; "
            "print(bad); sys.exit(1 if bad else 0)")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                            check=False)
    assert result.returncode == 0, result.stdout + result.stderr
