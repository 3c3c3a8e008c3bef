"""The pods a release runs, as NetworkPolicies see them: the chart's (operator, Redis) and
those the operator renders for a JobQueue (workers, the reaper's Jobs, the API).

The JobQueue pods come from the operator's own rendering (antre_operator.rendering) of the
chart's example JobQueue, so a label changed on either side shows up in the policy tests.
"""

from __future__ import annotations

from typing import Any

from antre_operator import rendering, spec

from .helm_runner import NAMESPACE, Rendering
from .selectors import Pod

OWNER_UID = "00000000-0000-0000-0000-000000000000"


def pod_templates(manifest: dict[str, Any]) -> dict[str, Any]:
    if manifest["kind"] == "CronJob":
        return dict(manifest["spec"]["jobTemplate"]["spec"]["template"])
    return dict(manifest["spec"]["template"])


def chart_pods(chart: Rendering) -> dict[str, Pod]:
    """The operator and Redis pods of a rendering, by component ("redis" is pod 0)."""
    pods = {}
    for kind in ("Deployment", "StatefulSet"):
        for manifest in chart.of_kind(kind):
            labels = pod_templates(manifest)["metadata"]["labels"]
            component = labels["app.kubernetes.io/component"]
            pods[component] = Pod(f"{manifest['metadata']['name']}-0", NAMESPACE, labels)
    return pods


def jobqueue_pods(chart: Rendering, namespace: str) -> dict[str, Pod]:
    """The pods of the chart's example JobQueue, had it been created in ``namespace``."""
    example = chart.one("JobQueue")
    parsed = spec.parse_jobqueue(name=example["metadata"]["name"], namespace=namespace,
                                 spec=example["spec"])
    children = rendering.render_children(parsed, OWNER_UID, replicas=1).present
    pods = {}
    for manifest in children:
        if manifest["kind"] in {"Deployment", "CronJob"}:
            labels = pod_templates(manifest)["metadata"]["labels"]
            component = labels["app.kubernetes.io/component"]
            pods[component] = Pod(f"{manifest['metadata']['name']}-0", namespace, labels)
    assert set(pods) == {"worker", "reaper", "api"}, sorted(pods)
    return pods
