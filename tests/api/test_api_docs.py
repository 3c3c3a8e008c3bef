"""docs/api.md stays a faithful guide to the OpenAPI document: every documented path and
method appears in its endpoint table, and every error status the document declares is explained."""

from __future__ import annotations

import re
from pathlib import Path

from antre import openapi

DOC = Path(__file__).resolve().parents[2] / "docs" / "api.md"


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
