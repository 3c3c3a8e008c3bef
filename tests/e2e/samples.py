"""JobQueue bodies for the end-to-end tests."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import yaml

REPO_ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = REPO_ROOT / "examples"


def jobqueue(name: str = "emails", **spec: Any) -> dict[str, Any]:
    """A JobQueue whose Redis URL comes from the Secret ``redis-url`` and whose workers run the
    stock example handlers (so a worker pod runs and the JobQueue can turn Ready); ``spec`` keys
    replace the minimal spec's (None deletes one)."""
    body: dict[str, Any] = {
        "apiVersion": "antre.dev/v1alpha1",
        "kind": "JobQueue",
        "metadata": {"name": name},
        "spec": {"redis": {"urlSecretRef": {"name": "redis-url", "key": "url"}},
                 "worker": {"handlers": "antre.example_handlers"}},
    }
    for key, value in spec.items():
        if value is None:
            body["spec"].pop(key, None)
        else:
            body["spec"][key] = copy.deepcopy(value)
    return body


def example(name: str) -> dict[str, Any]:
    """examples/<name>.yaml as a dict."""
    return dict(yaml.safe_load((EXAMPLES / f"{name}.yaml").read_text()))


def redis_url_secret(url: str, name: str = "redis-url") -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": name},
            "stringData": {"url": url}}
