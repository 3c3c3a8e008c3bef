"""Secrets with GitOps tools that render the chart without cluster access.

Argo CD (and `helm template | kubectl apply`) render with no cluster to read, so Helm's `lookup`
finds nothing and a generated Redis password or API token would be new on every sync, locking
running pods out. Aspects: with redis.auth.existingSecret and exampleJobQueue.apiToken.
existingSecret the chart generates no Secret, every reference (Redis pods, the example
JobQueue, NOTES) names the existing ones, and two renders are byte-identical; without them the
generated values do change from one render to the next (why the docs say to use them); naming
the token Secret twice is refused.
"""

from __future__ import annotations

import base64
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

from .helm_runner import (
    CHART_DIR,
    FULLNAME,
    NAMESPACE,
    RELEASE,
    Rendering,
    render_error,
    run_helm,
    values_args,
)

Render = Callable[[dict[str, Any]], Rendering]
API_ON = {"api": {"enabled": True, "dashboard": {"enabled": True}}}


def gitops_values(architecture: str) -> dict[str, Any]:
    return {"redis": {"enabled": True, "architecture": architecture,
                      "auth": {"existingSecret": "redis-creds"}},
            "exampleJobQueue": {"enabled": True, "spec": API_ON,
                                "apiToken": {"existingSecret": "api-creds",
                                             "existingSecretKey": "bearer"}}}


def generated_values(architecture: str) -> dict[str, Any]:
    return {"redis": {"enabled": True, "architecture": architecture},
            "exampleJobQueue": {"enabled": True, "spec": API_ON}}


def template_text(helm: str, tmp_path: Path, values: dict[str, Any]) -> str:
    """What a GitOps tool applies: `helm template` output, rendered without a cluster."""
    result = run_helm(helm, "template", RELEASE, str(CHART_DIR), "--namespace", NAMESPACE,
                      *values_args(values, tmp_path))
    assert result.returncode == 0, result.stderr
    return result.stdout


def test_api_token_from_an_existing_secret(rendered: Render) -> None:
    rendering = rendered(gitops_values("standalone"))
    assert not rendering.of_kind("Secret"), "neither the password nor the token is generated"
    queue = rendering.one("JobQueue", "example")
    assert queue["spec"]["api"]["tokenSecretRef"] == {"name": "api-creds", "key": "bearer"}
    assert queue["spec"]["redis"]["urlSecretRef"] == {"name": "redis-creds", "key": "redis-url"}
    env = rendering.one("StatefulSet")["spec"]["template"]["spec"]["containers"][0]["env"]
    assert {e["valueFrom"]["secretKeyRef"]["name"] for e in env if "valueFrom" in e} == {
        "redis-creds"}


def test_notes_read_the_token_from_the_existing_secret(helm: str, tmp_path: Path) -> None:
    result = run_helm(helm, "install", RELEASE, str(CHART_DIR), "--namespace", NAMESPACE,
                      "--dry-run=client", *values_args(gitops_values("standalone"), tmp_path))
    assert result.returncode == 0, result.stderr
    assert "get secret api-creds -o jsonpath='{.data.bearer}'" in result.stdout


@pytest.mark.parametrize("architecture", ["standalone", "replication"])
def test_renders_without_cluster_access_are_identical(
        helm: str, tmp_path: Path, architecture: str) -> None:
    values = gitops_values(architecture)
    first = template_text(helm, tmp_path, values)
    assert first == template_text(helm, tmp_path, values), "a sync would change the release"


@pytest.mark.parametrize("architecture", ["standalone", "replication"])
def test_generated_secrets_change_on_every_render_without_cluster_access(
        helm: str, tmp_path: Path, architecture: str) -> None:
    """Why the existing Secrets are needed with GitOps tools: this is what they would apply."""
    def secrets() -> dict[str, dict[str, str]]:
        docs = yaml.safe_load_all(template_text(helm, tmp_path, generated_values(architecture)))
        return {d["metadata"]["name"]: {k: base64.b64decode(v).decode()
                                        for k, v in d["data"].items()}
                for d in docs if d and d["kind"] == "Secret"}

    first, second = secrets(), secrets()
    redis, token = f"{FULLNAME}-redis", f"{FULLNAME}-example-api-token"
    assert set(first) == {redis, token}
    assert first[redis]["redis-password"] != second[redis]["redis-password"]
    assert first[token]["token"] != second[token]["token"]


def test_the_token_secret_named_twice_is_refused(helm: str, tmp_path: Path) -> None:
    values = gitops_values("standalone")
    values["exampleJobQueue"]["spec"] = {"api": {"enabled": True,
                                                 "tokenSecretRef": {"name": "other"}}}
    error = render_error(helm, tmp_path, values)
    assert ("exampleJobQueue.apiToken.existingSecret and exampleJobQueue.spec.api.tokenSecretRef "
            "both name the API token's Secret: set only one") in error
