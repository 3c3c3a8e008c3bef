"""The optional example JobQueue.

Aspects: off by default; points at the chart's Redis Secret when redis.enabled; keeps a
user-given spec.redis; with the API on and no token Secret named, the chart generates one and
references it (the CRD requires spec.api.tokenSecretRef then); without any Redis the chart
refuses with a message saying what to set; it runs the example handlers shipped in the
package, so the stock image serves it. That the API server accepts it (schema and CEL rules) is
tested on a real one: tests/e2e/test_helm.py.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml

from .helm_runner import FULLNAME, Rendering, render_error

REPO_ROOT = Path(__file__).resolve().parents[2]
Render = Callable[[dict[str, Any]], Rendering]
ON = {"enabled": True}


def test_off_by_default(rendered: Render) -> None:
    assert not rendered({}).of_kind("JobQueue")


def test_uses_the_chart_redis(rendered: Render) -> None:
    queue = rendered({"redis": ON, "exampleJobQueue": ON}).one("JobQueue", "example")
    assert queue["spec"]["redis"] == {
        "urlSecretRef": {"name": f"{FULLNAME}-redis", "key": "redis-url"}}


def test_uses_the_existing_redis_secret_url_key(rendered: Render) -> None:
    queue = rendered({
        "redis": {"enabled": True, "auth": {"existingSecret": "mine", "existingSecretUrlKey": "u"}},
        "exampleJobQueue": ON,
    }).one("JobQueue")
    assert queue["spec"]["redis"]["urlSecretRef"] == {"name": "mine", "key": "u"}


def test_keeps_a_given_redis(rendered: Render) -> None:
    redis = {"url": "redis://elsewhere:6380/1"}
    queue = rendered({"redis": ON, "exampleJobQueue": {"enabled": True, "spec": {
        "redis": redis, "worker": {"handlers": "myapp.jobs"}}}}).one("JobQueue")
    assert queue["spec"]["redis"] == redis
    # helm merges user values into the defaults, so concurrency: 4 stays.
    assert queue["spec"]["worker"]["handlers"] == "myapp.jobs"


def test_api_token_is_generated_when_not_given(rendered: Render) -> None:
    rendering = rendered({"redis": ON, "exampleJobQueue": {
        "enabled": True, "spec": {"api": {"enabled": True}}}})
    queue = rendering.one("JobQueue")
    secret_name = f"{FULLNAME}-example-api-token"
    assert queue["spec"]["api"]["tokenSecretRef"] == {"name": secret_name, "key": "token"}
    assert "token" in rendering.one("Secret", secret_name)["data"]


def test_api_token_secret_given(rendered: Render) -> None:
    ref = {"name": "api-token", "key": "t"}
    rendering = rendered({"redis": ON, "exampleJobQueue": {
        "enabled": True, "spec": {"api": {"enabled": True, "tokenSecretRef": ref}}}})
    assert rendering.one("JobQueue")["spec"]["api"]["tokenSecretRef"] == ref
    assert not [s for s in rendering.of_kind("Secret") if "api-token" in s["metadata"]["name"]]


def test_needs_some_redis(helm: str, tmp_path: Path) -> None:
    error = render_error(helm, tmp_path, {"exampleJobQueue": ON})
    assert "exampleJobQueue.spec.redis is required when redis.enabled is false" in error


def test_runs_handlers_the_stock_image_ships(rendered: Render) -> None:
    """The example needs no image of your own: its handlers module is in the antre package,
    and so is the one of examples/jobqueue.yaml; a worker stays up to exec into."""
    queue = rendered({"redis": ON, "exampleJobQueue": ON}).one("JobQueue", "example")
    example = yaml.safe_load((REPO_ROOT / "examples" / "jobqueue.yaml").read_text())
    for spec in (queue["spec"], example["spec"]):
        module = spec["worker"]["handlers"]
        assert module.startswith("antre.") and importlib.util.find_spec(module) is not None
        assert "image" not in spec["worker"]
        assert spec["autoscaling"]["minReplicas"] >= 1
