"""`helm lint` passes, and NOTES.txt tells the next step.

Aspects: lint --strict with the defaults and with everything turned on; the notes name the
release namespace, the Redis Secret to reference when Redis is on, what to do without Redis,
and the CRD upgrade step; the peering note comes first when there are several replicas; with
NetworkPolicies on, they say who may reach Redis and that enqueuers must be listed.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from .helm_runner import CHART_DIR, FULLNAME, NAMESPACE, RELEASE, run_helm, values_args

EVERYTHING_ON = {
    "networkPolicy": {"enabled": True},
    "redis": {"enabled": True},
    "exampleJobQueue": {"enabled": True, "spec": {"api": {"enabled": True}}},
    "operator": {"replicaCount": 2, "watchNamespaces": ["a"],
                 "podDisruptionBudget": {"enabled": True}},
}


@pytest.mark.parametrize("values", [{}, EVERYTHING_ON], ids=["defaults", "everything-on"])
def test_lint(helm: str, tmp_path: Path, values: dict) -> None:
    result = run_helm(helm, "lint", "--strict", str(CHART_DIR), *values_args(values, tmp_path))
    assert result.returncode == 0, result.stdout + result.stderr
    assert "1 chart(s) linted, 0 chart(s) failed" in result.stdout


def notes(helm: str, tmp_path: Path, values: dict) -> str:
    """NOTES.txt as `helm install` prints it (client-side dry run: no cluster needed)."""
    result = run_helm(helm, "install", RELEASE, str(CHART_DIR), "--namespace", NAMESPACE,
                      "--dry-run=client", *values_args(values, tmp_path))
    assert result.returncode == 0, result.stderr
    return result.stdout.split("NOTES:", 1)[1]


def test_notes_without_redis(helm: str, tmp_path: Path) -> None:
    text = notes(helm, tmp_path, {})
    assert f"has been deployed to namespace {NAMESPACE}" in text
    assert "No Redis was installed" in text
    assert "kubectl apply -f crds/" in text
    assert "kubectl --namespace <your-namespace> apply -f examples/jobqueue.yaml" in text
    assert "READY and REASON columns say whether its workers run" in text
    assert "kubectl describe jobqueue NAME" in text
    assert "delete jobqueue" not in text  # no example to delete


def test_notes_with_redis_and_peering(helm: str, tmp_path: Path) -> None:
    text = notes(helm, tmp_path, EVERYTHING_ON)
    assert text.lstrip().startswith("NOTE: operator.replicaCount=2")
    assert f"name: {FULLNAME}-redis" in text
    assert "key: redis-url" in text
    assert "watches JobQueues in: a" in text
    assert "get jobqueues example --watch" in text


def test_notes_warn_when_the_example_is_not_watched(helm: str, tmp_path: Path) -> None:
    text = notes(helm, tmp_path, EVERYTHING_ON)
    assert f"WARNING: the example JobQueue is in namespace {NAMESPACE}" in text
    watched = dict(EVERYTHING_ON, operator={"watchNamespaces": [NAMESPACE]})
    assert "WARNING" not in notes(helm, tmp_path, watched)


def test_notes_show_how_to_run_a_job_on_the_example(helm: str, tmp_path: Path) -> None:
    text = notes(helm, tmp_path, {"redis": {"enabled": True}, "exampleJobQueue": {"enabled": True}})
    enqueue = (f"kubectl --namespace {NAMESPACE} exec deploy/example-worker -- antre enqueue "
               "send_email '{\"to\": \"ana@example.com\"}'")
    assert enqueue in text
    assert "exec deploy/example-worker -- antre job <the id printed above>" in text
    # The example carries the operator's finalizer: the pre-delete hook deletes it first,
    # users' own JobQueues are theirs to delete (docs/helm.md, "Uninstalling").
    assert "`helm uninstall` deletes the example first (a pre-delete hook)" in text
    assert "Delete your own JobQueues yourself before uninstalling" in text
    assert "delete jobqueue example" not in text
    own = {"redis": {"enabled": True}, "exampleJobQueue": {
        "enabled": True, "spec": {"worker": {"handlers": "myapp.jobs", "image": "mine:1"}}}}
    assert "antre enqueue" not in notes(helm, tmp_path, own)  # not for handlers we do not know


@pytest.mark.parametrize("values", [
    pytest.param({"exampleJobQueue": {"enabled": True, "uninstallHook": {"enabled": False}}},
                 id="hook-off"),
    pytest.param({"exampleJobQueue": {"enabled": True}, "operator": {"rbac": {"create": False}}},
                 id="no-rbac"),
])
def test_notes_without_the_uninstall_hook_say_to_delete_the_example(
        helm: str, tmp_path: Path, values: dict[str, Any]) -> None:
    text = notes(helm, tmp_path, {"redis": {"enabled": True}, **values})
    assert f"kubectl --namespace {NAMESPACE} delete jobqueue example --wait" in text
    assert "pre-delete hook" not in text


def test_notes_show_how_to_open_the_dashboard(helm: str, tmp_path: Path) -> None:
    example = {"enabled": True, "spec": {"worker": {"handlers": "antre.example_handlers"},
                                         "api": {"enabled": True, "dashboard": {"enabled": True}}}}
    text = notes(helm, tmp_path, {"redis": {"enabled": True}, "exampleJobQueue": example})
    assert "kubectl --namespace antre-system port-forward svc/example-api 8080:80" in text
    assert "get secret rel-antre-example-api-token -o jsonpath='{.data.token}'" in text
    assert "http://127.0.0.1:8080/ui/" in text
    example["spec"]["api"]["dashboard"]["enabled"] = False
    assert "port-forward" not in notes(helm, tmp_path, {"redis": {"enabled": True},
                                                         "exampleJobQueue": example})


def test_notes_name_who_may_reach_redis_with_network_policies(helm: str, tmp_path: Path) -> None:
    text = notes(helm, tmp_path, EVERYTHING_ON)
    assert "the pods of JobQueues in a\nand the clients in networkPolicy.redis.extraIngress" in text
    assert "NetworkPolicies" not in notes(helm, tmp_path, {"redis": {"enabled": True}})
