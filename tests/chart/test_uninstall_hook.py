"""The example JobQueue's pre-delete hook: `helm uninstall` deletes the example first.

Aspects: rendered exactly when the example is (and the hook is not turned off); its
ServiceAccount, Role, RoleBinding and Job are all pre-delete hooks, created in that order and
deleted once the Job has succeeded (or before the next try); the Job runs the operator's image
(digest, pull secrets, node placement as the operator's) with a command antre_operator.uninstall
accepts, naming the example, the release namespace and the timeout; its deadline leaves the
program time to report its own timeout; the program's own failure exit codes fail the Job at
once (podFailurePolicy), a pod lost to its node does not count, and a crash is retried once.
Its RBAC is in test_rbac.py, its pod's security in test_pod_security.py, the policy under the
real Job controller in tests/e2e/test_uninstall_hook_job.py, and the hook at work on a real API
server in tests/e2e/test_helm.py.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from antre_operator import uninstall

from .helm_runner import FULLNAME, NAMESPACE, VARIANTS, Rendering

Render = Callable[[dict[str, Any]], Rendering]
HOOK = f"{FULLNAME}-example-uninstall"
EXAMPLE = {"redis": {"enabled": True}, "exampleJobQueue": {"enabled": True}}
KINDS = ("ServiceAccount", "Role", "RoleBinding", "Job")


def hook_objects(rendering: Rendering) -> list[dict[str, Any]]:
    return [m for m in rendering.manifests
            if "helm.sh/hook" in (m["metadata"].get("annotations") or {})]


def pod_of(rendering: Rendering) -> dict[str, Any]:
    return dict(rendering.one("Job", HOOK)["spec"]["template"]["spec"])


def test_rendered_with_the_example_only(rendering: Rendering, variant: str) -> None:
    hooks = hook_objects(rendering)
    values = VARIANTS[variant]
    rbac = ((values.get("operator") or {}).get("rbac") or {}).get("create", True)
    if (values.get("exampleJobQueue") or {}).get("enabled") and rbac:
        assert sorted(m["kind"] for m in hooks) == sorted(KINDS)
        assert {m["metadata"]["name"] for m in hooks} == {HOOK}
    else:
        assert hooks == []


def test_can_be_turned_off(rendered: Render) -> None:
    off = rendered({**EXAMPLE, "exampleJobQueue": {"enabled": True,
                                                   "uninstallHook": {"enabled": False}}})
    assert off.one("JobQueue", "example")
    assert hook_objects(off) == []


def test_not_rendered_where_the_chart_creates_no_rbac(rendered: Render) -> None:
    """The hook creates a Role of its own: where the chart may not create RBAC, the first
    `helm uninstall` would fail creating it. Without rbac.create there is no hook, and NOTES
    says to delete the example first (test_lint_and_notes.py)."""
    without = rendered({**EXAMPLE, "operator": {"rbac": {"create": False}}})
    assert without.one("JobQueue", "example")
    assert hook_objects(without) == []


def test_every_object_is_a_pre_delete_hook_in_order(rendered: Render) -> None:
    weights = {}
    for manifest in hook_objects(rendered(EXAMPLE)):
        annotations = manifest["metadata"]["annotations"]
        assert annotations["helm.sh/hook"] == "pre-delete", manifest["kind"]
        # Gone once the Job succeeded; a failed Job stays for `kubectl logs` until the next try.
        assert annotations["helm.sh/hook-delete-policy"] == "before-hook-creation,hook-succeeded"
        weights[manifest["kind"]] = int(annotations["helm.sh/hook-weight"])
    # The Job's pod needs its account and rights when it starts.
    assert weights["ServiceAccount"] < weights["RoleBinding"] < weights["Job"]
    assert weights["Role"] < weights["RoleBinding"]


def test_the_job_deletes_the_example_with_the_operator_image(rendered: Render) -> None:
    rendering = rendered({**EXAMPLE, "exampleJobQueue": {
        "enabled": True, "name": "demo", "uninstallHook": {"timeoutSeconds": 45}}})
    job = rendering.one("Job", HOOK)
    pod = pod_of(rendering)
    (container,) = pod["containers"]
    operator = rendering.one("Deployment", f"{FULLNAME}-operator")
    assert container["image"] == operator["spec"]["template"]["spec"]["containers"][0]["image"]
    command = container["command"]
    assert command[:3] == ["python", "-m", "antre_operator.uninstall"]
    args = uninstall.parse_args(command[3:])
    assert (args.namespace, args.name, args.timeout) == (NAMESPACE, "demo", 45)
    assert pod["restartPolicy"] == "Never"
    assert job["spec"]["backoffLimit"] == 1
    # The program reports its own timeout in a line; the Job's deadline only backs it up.
    assert job["spec"]["activeDeadlineSeconds"] > 45
    assert container["terminationMessagePolicy"] == "FallbackToLogsOnError"


def test_the_pod_is_placed_and_pulled_like_the_operator(rendered: Render) -> None:
    placement = {"nodeSelector": {"pool": "system"},
                 "tolerations": [{"key": "system", "operator": "Exists", "effect": "NoSchedule"}]}
    digest = "sha256:" + "a" * 64
    pod = pod_of(rendered({**EXAMPLE, "imagePullSecrets": [{"name": "regcred"}],
                           "operator": {**placement, "image": {"digest": digest}}}))
    assert pod["imagePullSecrets"] == [{"name": "regcred"}]
    assert pod["containers"][0]["image"] == f"ghcr.io/antre-dev/antre-operator@{digest}"
    assert {key: pod[key] for key in placement} == placement


def test_the_pod_carries_the_hook_component_label(rendered: Render) -> None:
    """What `kubectl get pods -l app.kubernetes.io/component=example-uninstall` finds."""
    labels = rendered(EXAMPLE).one("Job", HOOK)["spec"]["template"]["metadata"]["labels"]
    assert labels["app.kubernetes.io/component"] == "example-uninstall"
    assert labels["app.kubernetes.io/instance"] == "rel"


def test_no_hook_object_takes_the_name_of_a_release_object(rendered: Render) -> None:
    """before-hook-creation deletes whatever has the hook's kind and name: a hook cut to the
    operator's ServiceAccount name (a full name of 62 or 63 characters: fullnameOverride, or a
    53-character release with a nameOverride) would delete the operator's account and so its
    token, leaving the example Terminating and the uninstall failed."""
    for length in (63, 62, 61, 46, 45):
        rendering = rendered({**EXAMPLE, "fullnameOverride": "f" * length})
        hooks = hook_objects(rendering)
        assert len(hooks) == len(KINDS)
        release = {(m["kind"], m["metadata"]["name"]) for m in rendering.manifests
                   if m not in hooks}
        for hook in hooks:
            name = hook["metadata"]["name"]
            assert (hook["kind"], name) not in release, (length, hook["kind"], name)
            assert len(name) <= 63 and name.endswith("-example-uninstall"), (length, name)


def test_the_programs_own_failures_fail_the_job_at_once(rendered: Render) -> None:
    """backoffLimit alone ran a second pod after the program's own one-line failure, and helm
    waited a second timeout for the same answer. The policy fails the Job on the exit codes
    the program gives its verdicts (not on 1, Python's exit for a crash, which keeps its one
    retry), and does not count a pod its node lost."""
    rendering = rendered(EXAMPLE)
    spec = rendering.one("Job", HOOK)["spec"]
    (container,) = pod_of(rendering)["containers"]
    # podFailurePolicy is refused without it.
    assert pod_of(rendering)["restartPolicy"] == "Never"
    fail, ignore = spec["podFailurePolicy"]["rules"]
    assert fail == {"action": "FailJob", "onExitCodes": {
        "containerName": container["name"], "operator": "In",
        "values": sorted({uninstall.EXIT_USAGE, uninstall.EXIT_FAILED})}}
    assert 1 not in fail["onExitCodes"]["values"]
    assert ignore == {"action": "Ignore", "onPodConditions": [{"type": "DisruptionTarget",
                                                                   "status": "True"}]}
