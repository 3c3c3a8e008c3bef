"""Every pod the chart renders meets the Kubernetes "restricted" Pod Security Standard.

Aspects (https://kubernetes.io/docs/concepts/security/pod-security-standards/#restricted):
runAsNonRoot and a non-zero runAsUser; allowPrivilegeEscalation false; capabilities drop ALL
and add nothing beyond NET_BIND_SERVICE; seccomp RuntimeDefault or Localhost; no host
namespaces, hostPath, hostPort or privileged containers; only the allowed volume types.
Beyond the standard: a read-only root filesystem, and images pinned to a tag or digest.
"""

from __future__ import annotations

from typing import Any

from .helm_runner import FULLNAME, Rendering

ALLOWED_VOLUME_TYPES = {"configMap", "csi", "downwardAPI", "emptyDir", "ephemeral",
                        "persistentVolumeClaim", "projected", "secret"}


def effective(pod: dict[str, Any], container: dict[str, Any], field: str) -> Any:
    """A security field as the kubelet sees it: the container's, else the pod's."""
    own = container.get("securityContext", {})
    if field in own:
        return own[field]
    return pod.get("securityContext", {}).get(field)


def restricted_violations(pod: dict[str, Any]) -> list[str]:
    problems = []
    for key in ("hostNetwork", "hostPID", "hostIPC"):
        if pod.get(key):
            problems.append(f"{key} is set")
    for volume in pod.get("volumes", []):
        kinds = set(volume) - {"name"}
        if not kinds <= ALLOWED_VOLUME_TYPES:
            problems.append(f"volume {volume['name']} uses {kinds - ALLOWED_VOLUME_TYPES}")
    containers = pod.get("containers", []) + pod.get("initContainers", [])
    for c in containers:
        sc = c.get("securityContext", {})
        name = c["name"]
        if effective(pod, c, "runAsNonRoot") is not True:
            problems.append(f"{name}: runAsNonRoot is not true")
        if effective(pod, c, "runAsUser") == 0:
            problems.append(f"{name}: runAsUser is 0")
        if sc.get("allowPrivilegeEscalation") is not False:
            problems.append(f"{name}: allowPrivilegeEscalation is not false")
        if sc.get("privileged"):
            problems.append(f"{name}: privileged")
        caps = sc.get("capabilities", {})
        if "ALL" not in caps.get("drop", []):
            problems.append(f"{name}: capabilities do not drop ALL")
        if set(caps.get("add", [])) - {"NET_BIND_SERVICE"}:
            problems.append(f"{name}: adds capabilities {caps['add']}")
        seccomp = effective(pod, c, "seccompProfile") or {}
        if seccomp.get("type") not in {"RuntimeDefault", "Localhost"}:
            problems.append(f"{name}: seccompProfile is {seccomp.get('type')}")
        if sc.get("readOnlyRootFilesystem") is not True:
            problems.append(f"{name}: root filesystem is writable")
        for port in c.get("ports", []):
            if port.get("hostPort"):
                problems.append(f"{name}: hostPort {port['hostPort']}")
    return problems


def test_every_pod_is_restricted(rendering: Rendering) -> None:
    assert rendering.pod_specs(), "no workload rendered"
    problems = [f"{where}: {p}" for where, pod in rendering.pod_specs()
                for p in restricted_violations(pod)]
    assert not problems, "\n".join(problems)


def test_checker_catches_a_privileged_pod() -> None:
    """The checker itself: a plain pod with no security context fails on every count."""
    problems = restricted_violations({"hostNetwork": True, "containers": [{"name": "c"}],
                                      "volumes": [{"name": "h", "hostPath": {"path": "/"}}]})
    assert len(problems) == 7, problems


def test_images_are_pinned(rendering: Rendering) -> None:
    for where, pod in rendering.pod_specs():
        for c in pod["containers"]:
            image = c["image"]
            assert "@sha256:" in image or (":" in image.rsplit("/", 1)[-1]
                                           and not image.endswith(":latest")), (where, image)


def test_writable_paths_are_volumes(rendering: Rendering) -> None:
    """With a read-only root, /tmp must be a volume in every container."""
    for where, pod in rendering.pod_specs():
        for c in pod["containers"]:
            mounts = {m["mountPath"] for m in c.get("volumeMounts", [])}
            assert "/tmp" in mounts, f"{where}/{c['name']} has no writable /tmp"


# The pods that talk to the API server: the operator, and the hook deleting the example.
API_CLIENTS = (f"Deployment/{FULLNAME}-operator", f"Job/{FULLNAME}-example-uninstall")


def test_only_api_clients_mount_an_api_token(rendering: Rendering) -> None:
    """No pod automounts a token (the ServiceAccounts do not either, so a pod that names one
    gets none); the operator and the uninstall hook mount theirs through a projected volume."""
    for where, pod in rendering.pod_specs():
        assert pod.get("automountServiceAccountToken") is False, where
        projected = [source for volume in pod.get("volumes") or []
                     for source in (volume.get("projected") or {}).get("sources") or []
                     if "serviceAccountToken" in source]
        assert bool(projected) is (where in API_CLIENTS), where
    for account in rendering.of_kind("ServiceAccount"):
        assert account["automountServiceAccountToken"] is False
