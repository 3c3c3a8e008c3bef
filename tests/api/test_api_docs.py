"""docs/api.md stays a faithful guide to the OpenAPI document: every documented path and
method appears in its endpoint table, and every error status the document declares is explained;
docs/security.md is linked from README and the tests it names exist."""

from __future__ import annotations

import re
from pathlib import Path

from antre import openapi

REPO_ROOT = Path(__file__).resolve().parents[2]
DOC = REPO_ROOT / "docs" / "api.md"


def test_every_openapi_operation_is_in_the_endpoint_table() -> None:
    text = DOC.read_text()
    for path, item in openapi.document()["paths"].items():
        for method in item:
            assert f"`{method.upper()} {path}`" in text, f"{method.upper()} {path}"


def test_every_declared_error_status_is_explained() -> None:
    text = DOC.read_text()
    statuses = {code for item in openapi.document()["paths"].values() for op in item.values()
                for code in op["responses"] if code.startswith(("4", "5"))}
    explained = set(re.findall(r"^\| (\d{3}) \|", text, flags=re.MULTILINE))
    assert statuses <= explained, statuses - explained


def test_security_doc_is_linked_and_names_tests_that_exist() -> None:
    security = (REPO_ROOT / "docs" / "security.md").read_text()
    assert "(docs/security.md)" in (REPO_ROOT / "README.md").read_text()
    named = set(re.findall(r"\b(test_[a-z0-9_]+)\b(?!\.py)", security))
    files = set(re.findall(r"`(tests/[\w/]+\.py)", security))
    assert named and files
    sources = "\n".join(path.read_text() for path in (REPO_ROOT / "tests").rglob("test_*.py"))
    assert {name for name in named if f"def {name}(" not in sources} == set()
    assert {path for path in files if not (REPO_ROOT / path).exists()} == set()
