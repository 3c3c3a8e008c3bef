"""A JobQueue author tries to get more than Deployments in their own namespace, and fails.

On the real API server, with the chart installed cluster-wide (its RBAC) and an allow-list in
``operator.jobQueuePolicy``, the user alice may only manage JobQueues in namespace team-a (a Role
with jobqueues and nothing else). Each escalation of issue 12's operator section:

* Secret names that are paths (``../../victim/secrets/admin-creds``) in every object name of
  the spec, and an AppArmor ``unconfined`` pod annotation: refused by the API server (the CRD),
  with the field named; and the operator's own client, with the chart's credentials, asked for
  such a name, reads nothing outside team-a (dot segments were collapsed into the victim's path);
* an image from another registry, a Redis host outside the allow-list, a JobQueue in the
  operator's namespace naming the operator's ServiceAccount: a NotAllowed condition, no pods;
* spec.redis.tls with a plain-text URL in the Secret: InvalidRedisUrl, no pods;
* a Secret without the key named: the status names the key, never the keys the Secret has
  (alice cannot read the Secret: the status was the only way);
* pointing the operator at a port that answers with a banner, and at a closed one: the same
  words in the status, no byte of the banner;

while a good JobQueue of alice's is served, its pods as "default" with no token mounted, and
one naming a ServiceAccount has only its workers run as that account.
"""

from __future__ import annotations

import asyncio
import json
import socket
import threading
from collections.abc import Iterator
from typing import Any

import kubernetes
import pytest
from antre_operator import backlog, kube
from redis_servers import free_port, wait_until

from .cluster import Cluster
from .samples import jobqueue, redis_url_secret
from .serving import SETTLE_S, Served, condition, serve

TRAVERSAL = "../../{victim}/secrets/admin-creds"
POLICY = {"jobQueuePolicy": {"imageRegistries": ["ghcr.io/antre-dev"],
                             "redisHosts": ["127.0.0.1"]}}


@pytest.fixture(scope="module")
def served(cluster: Cluster, crds: None,
           tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    with serve(cluster, "cluster-wide", tmp_path_factory.mktemp("tenants"),
               operator_values=POLICY) as served:
        yield served
    assert not served.refusals(), "\n".join(served.refusals())


@pytest.fixture(scope="module")
def victim(cluster: Cluster) -> Iterator[str]:
    """Another tenant's namespace, with a Secret alice must never reach."""
    namespace = cluster.create_namespace("victim")
    cluster.apply(redis_url_secret("redis://:victim-password@127.0.0.1:6379/0", "admin-creds"),
                  namespace=namespace)
    yield namespace
    cluster.delete_namespace(namespace)


@pytest.fixture(scope="module")
def alice(served: Served) -> Any:
    """A kubeconfig of a user who may manage JobQueues in the served namespace, nothing else."""
    cluster, ns = served.cluster, served.namespace
    cluster.grant(ns, group="team-a", role="jobqueue-author", rules=[
        {"apiGroups": ["antre.dev"], "resources": ["jobqueues"],
         "verbs": ["get", "list", "watch", "create", "update", "patch", "delete"]}])
    return cluster.user_kubeconfig("alice@example.com", ["team-a"], namespace=ns)


def as_alice(served: Served, alice: Any, body: dict[str, Any]) -> Any:
    return served.cluster.apply(body, namespace=served.namespace, kubeconfig=alice, check=False)


@pytest.mark.parametrize("changes, field", [
    pytest.param({"redis": {"urlSecretRef": {"name": TRAVERSAL}}},
                 "spec.redis.urlSecretRef.name", id="redis-url-secret"),
    pytest.param({"api": {"enabled": True, "tokenSecretRef": {"name": TRAVERSAL}}},
                 "spec.api.tokenSecretRef.name", id="api-token-secret"),
    pytest.param({"worker": {"serviceAccountName": "../../kube-system/serviceaccounts/admin"}},
                 "spec.worker.serviceAccountName", id="service-account"),
    pytest.param({"worker": {"imagePullSecrets": [{"name": TRAVERSAL}]}},
                 "spec.worker.imagePullSecrets[0].name", id="pull-secret"),
    pytest.param({"worker": {"podAnnotations": {
        "container.apparmor.security.beta.kubernetes.io/worker": "unconfined"}}},
                 "spec.worker.podAnnotations", id="apparmor-unconfined"),
])
def test_paths_for_names_and_profile_annotations_are_refused_at_admission(
        served: Served, alice: Any, victim: str, changes: dict[str, Any], field: str) -> None:
    body = jobqueue("sneaky", **{k: _with_victim(v, victim) for k, v in changes.items()})
    result = as_alice(served, alice, body)
    assert result.returncode != 0, result.stdout
    assert field in result.stderr and "Invalid value" in result.stderr, result.stderr
    assert served.child("jobqueue", "sneaky") is None


def _with_victim(value: Any, victim: str) -> Any:
    if isinstance(value, str):
        return value.format(victim=victim)
    if isinstance(value, dict):
        return {k: _with_victim(v, victim) for k, v in value.items()}
    if isinstance(value, list):
        return [_with_victim(v, victim) for v in value]
    return value


def test_the_operators_client_never_reads_outside_the_namespace(served: Served,
                                                               victim: str) -> None:
    """With the chart's credentials (which may read Secrets cluster-wide), a name that is a
    path reads nothing: not the victim's Secret, whatever the name holds."""
    config = operator_configuration(served)

    async def read(name: str) -> Any:
        client = kube.KubeClient(timeout_s=30, configuration=config)
        try:
            return await client.get("Secret", served.namespace, name)
        except kube.KubeError as exc:
            return exc
        finally:
            await client.close()

    assert isinstance(asyncio.run(read("admin-creds")), type(None))  # team-a has none
    for name in (TRAVERSAL.format(victim=victim), f"../../{victim}/secrets/admin-creds/",
                 f"..%2F..%2F{victim}%2Fsecrets%2Fadmin-creds"):
        got = asyncio.run(read(name))
        assert got is None or isinstance(got, kube.KubeError), got
        assert "victim-password" not in str(got)


class BannerServer:
    """A TCP port that answers anything with an SSH-like banner, then closes."""

    BANNER = b"SSH-2.0-OpenSSH_9.6 internal-build-host-7\r\n"

    def __init__(self) -> None:
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.port = self.sock.getsockname()[1]
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self) -> None:
        while True:
            try:
                connection, _ = self.sock.accept()
            except OSError:
                return
            with connection:
                connection.sendall(self.BANNER)

    def close(self) -> None:
        self.sock.close()


def ready_condition(served: Served, name: str, status: str) -> dict[str, Any]:
    jq = served.cluster.wait_for(
        "jobqueue", name, served.namespace, timeout_s=SETTLE_S,
        until=lambda body: condition(body, "Ready") == status
        and (status == "True" or _ready(body)["reason"] not in ("", None)),
        what=f"JobQueue {name} Ready={status}")
    return _ready(jq)


def _ready(body: dict[str, Any]) -> dict[str, Any]:
    return next(c for c in (body.get("status") or {}).get("conditions") or []
                if c["type"] == "Ready")


def test_what_the_operator_refuses_renders_nothing(served: Served, alice: Any) -> None:
    cluster, ns = served.cluster, served.namespace
    # A teammate with Secret rights made these; alice cannot read them (RBAC: JobQueues only).
    port = served.redis.port
    cluster.apply([redis_url_secret(f"redis://:cleartext-pw@127.0.0.1:{port}/0", "plaintext"),
                   {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "several"},
                    "stringData": {"admin-password": "hunter", "billing-token": "token"}},
                   redis_url_secret("redis://:pw@10.96.0.1:443/0", "elsewhere")], namespace=ns)
    refused = cluster.kubectl("get", "secret", "several", "-n", ns, kubeconfig=alice,
                              check=False)
    assert refused.returncode != 0 and "forbidden" in refused.stderr

    banner, closed = BannerServer(), free_port()
    try:
        cases = {
            "foreign-image": (jobqueue("foreign-image",
                                       worker={"image": "docker.io/attacker/miner:1"}),
                              "NotAllowed"),
            "far-host": (jobqueue("far-host", redis={"url": "redis://10.96.0.1:443/0"}),
                         "NotAllowed"),
            "far-secret": (jobqueue("far-secret", redis={"urlSecretRef": {"name": "elsewhere"}}),
                           "NotAllowed"),
            "cleartext": (jobqueue("cleartext", redis={"urlSecretRef": {"name": "plaintext"},
                                                       "tls": True}), "InvalidRedisUrl"),
            "keys": (jobqueue("keys", redis={"urlSecretRef": {"name": "several"}}),
                     "SecretKeyNotFound"),
            "banner": (jobqueue("banner", redis={"url": f"redis://127.0.0.1:{banner.port}/0"}),
                       "RedisUnreachable"),
            "closed": (jobqueue("closed", redis={"url": f"redis://127.0.0.1:{closed}/0"}),
                       "RedisUnreachable"),
            "good": (jobqueue("good"), None),
        }
        for body, _ in cases.values():
            result = as_alice(served, alice, body)
            assert result.returncode == 0, result.stderr
        good = ready_condition(served, "good", "True")
        assert good["status"] == "True"
        conditions = {name: ready_condition(served, name, "False")
                      for name, (_, reason) in cases.items() if reason is not None}
    finally:
        banner.close()
    for name, (_, reason) in cases.items():
        if reason is None:
            continue
        got = conditions[name]
        assert got["reason"] == reason, (name, got)
        if reason in ("NotAllowed", "InvalidRedisUrl"):
            assert served.child("deployment", f"{name}-worker") is None, name
            assert served.child("cronjob", f"{name}-reaper") is None, name
    assert "docker.io/attacker/miner:1" in conditions["foreign-image"]["message"]
    assert "'10.96.0.1'" in conditions["far-secret"]["message"]
    assert "cleartext-pw" not in str(conditions["cleartext"])
    keys_status = str(served.child("jobqueue", "keys"))
    assert "admin-password" not in keys_status and "billing-token" not in keys_status
    assert conditions["keys"]["message"].endswith("has no key 'url'")
    # Same words for a banner and a closed port, none of the banner's.
    said = {name: conditions[name]["message"].split(": ", 1)[1] for name in ("banner", "closed")}
    assert said["banner"] == said["closed"], said
    assert backlog.NO_REDIS_MESSAGE in said["banner"]
    assert "OpenSSH" not in str(served.child("jobqueue", "banner"))

    pod = served.child("deployment", "good-worker")["spec"]["template"]["spec"]
    assert pod["serviceAccountName"] == "default" and pod["automountServiceAccountToken"] is False


def test_only_the_workers_run_as_the_account_the_jobqueue_names(served: Served,
                                                                 alice: Any) -> None:
    """spec.worker.serviceAccountName gives the handlers an identity (its token, a cloud role
    bound to it). The reaper and the API need Redis alone, so their pods, as the ReplicaSet
    controller creates them, run as "default" with no token."""
    cluster, ns = served.cluster, served.namespace
    cluster.apply([{"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "mailer"}},
                   {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "mailer-api"},
                    "stringData": {"token": "t" * 32}}], namespace=ns)
    body = jobqueue("mailer", worker={"handlers": "antre.example_handlers",
                                      "serviceAccountName": "mailer"},
                    api={"enabled": True, "tokenSecretRef": {"name": "mailer-api"}})
    result = as_alice(served, alice, body)
    assert result.returncode == 0, result.stderr
    reaper = served.wait_child("cronjob", "mailer-reaper")
    worker = served.wait_child("deployment", "mailer-worker")  # no backlog: no worker pod yet
    templates = {"reaper": reaper["spec"]["jobTemplate"]["spec"]["template"]["spec"],
                 "worker": worker["spec"]["template"]["spec"]}
    served.wait_child("deployment", "mailer-api")

    def api_pod_created() -> bool:
        pods = cluster.items("pods", ns, "antre.dev/jobqueue=mailer,"
                                         "app.kubernetes.io/component=api")
        if pods:
            templates["api"] = pods[0]["spec"]
        return bool(pods)

    wait_until(api_pod_created, timeout_s=SETTLE_S, message="an API pod of mailer")
    assert templates["worker"]["serviceAccountName"] == "mailer"
    assert "automountServiceAccountToken" not in templates["worker"]
    for component in ("api", "reaper"):
        pod = templates[component]
        assert pod["serviceAccountName"] == "default", component
        assert pod["automountServiceAccountToken"] is False, component
    # The API server's ServiceAccount admission mounts no token into those pods either.
    api_pod = templates["api"]
    assert not any(volume["name"].startswith("kube-api-access")
                   for volume in api_pod.get("volumes") or []), api_pod.get("volumes")
    cluster.kubectl("delete", "jobqueue", "mailer", "-n", ns, "--wait=true", "--timeout=60s")


def test_the_operators_namespace_and_account_are_not_for_jobqueues(served: Served) -> None:
    """Someone who may create JobQueues in the operator's namespace (alice may not: RBAC) still
    cannot have its pods run with the operator's token."""
    cluster, install = served.cluster, served.install
    cluster.kubectl("create", "secret", "generic", "redis-url", "-n", install.namespace,
                    f"--from-literal=url={served.redis.url}")
    body = jobqueue("inside", worker={"serviceAccountName": install.service_account})
    cluster.apply(body, namespace=install.namespace)
    jq = cluster.wait_for("jobqueue", "inside", install.namespace, timeout_s=SETTLE_S,
                          until=lambda b: condition(b, "Ready") == "False",
                          what="JobQueue inside refused")
    ready = _ready(jq)
    assert ready["reason"] == "NotAllowed", ready
    assert ready["message"].startswith(f"metadata.namespace: got '{install.namespace}'")
    assert cluster.get("deployment", "inside-worker", install.namespace) is None
    account = cluster.get("serviceaccount", install.service_account, install.namespace)
    assert account is not None and account["automountServiceAccountToken"] is False
    cluster.kubectl("delete", "jobqueue", "inside", "-n", install.namespace, "--wait=true",
                    "--timeout=60s")


RESTRICTED_POD = {"securityContext": {"runAsNonRoot": True, "runAsUser": 10001,
                                      "seccompProfile": {"type": "RuntimeDefault"}},
                  "containers": [{"name": "main", "image": "registry.k8s.io/pause:3.10",
                                  "securityContext": {"allowPrivilegeEscalation": False,
                                                      "capabilities": {"drop": ["ALL"]}}}]}


def operator_configuration(served: Served) -> Any:
    """The chart's credentials, as the operator's own client loads them."""
    config = kubernetes.client.Configuration()
    kubernetes.config.load_kube_config(  # type: ignore[no-untyped-call]
        config_file=str(served.cluster.service_account_kubeconfig(
            served.install.namespace, served.install.service_account)),
        client_configuration=config)
    return config


def refused_by_policy(config: Any, method: str, path: str, body: Any,
                      content_type: str = "application/merge-patch+json") -> str:
    """The request with the operator's credentials; the answer, which should be a refusal by
    one of the chart's admission policies (not by RBAC, which allows it)."""
    async def send() -> str:
        client = kube.KubeClient(timeout_s=30, configuration=config)
        try:
            await client.request(method, path, body=body, content_type=content_type)
        except kube.KubeError as exc:
            return str(exc)
        finally:
            await client.close()
        return f"{method} {path}: accepted"

    return asyncio.run(send())


def assert_refused(*args: Any, **kwargs: Any) -> None:
    answer = refused_by_policy(*args, **kwargs)
    assert "ValidatingAdmissionPolicy" in answer and "denied request" in answer, answer


def test_the_operators_token_writes_only_what_the_operator_renders(
        served: Served, victim: str) -> None:
    """What the chart's credential is worth to someone who stole it, cluster-wide: RBAC lets it
    patch any pod and create Deployments anywhere; the chart's admission policies let it only
    set pod-deletion-cost on the pods of JobQueue workloads and write JobQueue children."""
    cluster, install, ns = served.cluster, served.install, served.namespace
    operator = operator_configuration(served)
    cluster.apply([{"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "bystander"},
                    "spec": RESTRICTED_POD},
                   {"apiVersion": "v1", "kind": "Service", "metadata": {"name": "bystander"},
                    "spec": {"ports": [{"port": 80}]}}], namespace=victim)
    cost = "controller.kubernetes.io/pod-deletion-cost"
    annotate = {"metadata": {"annotations": {cost: "5"}}}
    assert_refused(operator, "PATCH", f"/api/v1/namespaces/{victim}/pods/bystander",
                             annotate)
    assert_refused(operator, "DELETE",
                             f"/api/v1/namespaces/{victim}/services/bystander", None,
                             content_type="application/json")
    stranger = {"apiVersion": "apps/v1", "kind": "Deployment",
                "metadata": {"name": "miner",
                             "labels": {"app.kubernetes.io/managed-by": "antre-operator"}},
                "spec": {"selector": {"matchLabels": {"app": "miner"}},
                         "template": {"metadata": {"labels": {"app": "miner"}},
                                      "spec": RESTRICTED_POD}}}
    assert_refused(operator, "POST", f"/apis/apps/v1/namespaces/{victim}/deployments",
                             stranger, content_type="application/json")
    assert cluster.get("deployment", "miner", victim) is None

    # A Deployment that passes for a child, run as the operator's own account: refused too.
    cluster.apply(jobqueue("owned", replicas=1, autoscaling={"enabled": False}), namespace=ns)
    served.wait_ready("owned")
    jq = served.child("jobqueue", "owned")
    assert jq is not None
    disguised = {**stranger, "metadata": {
        **stranger["metadata"], "ownerReferences": [{
            "apiVersion": "antre.dev/v1alpha1", "kind": "JobQueue", "name": "owned",
            "uid": jq["metadata"]["uid"]}]}}
    disguised["spec"] = {**stranger["spec"], "template": {
        **stranger["spec"]["template"],
        "spec": {**RESTRICTED_POD, "serviceAccountName": install.service_account}}}
    assert_refused(operator, "POST",
                             f"/apis/apps/v1/namespaces/{install.namespace}/deployments",
                             disguised, content_type="application/json")

    # Services that pass for a child: only one selecting its JobQueue's API pods, without
    # external IPs or an external name, is let through.
    api_selector = {"antre.dev/jobqueue": "owned", "app.kubernetes.io/component": "api"}
    service = {"apiVersion": "v1", "kind": "Service",
               "metadata": {**disguised["metadata"], "name": "owned-api"},
               "spec": {"type": "ClusterIP", "selector": api_selector,
                        "ports": [{"name": "http", "port": 8080, "targetPort": "http"}]}}
    for label, spec_change in [
            ("other pods", {"selector": {"app": "bystander"}}),
            ("another JobQueue's API", {"selector": {**api_selector,
                                                     "antre.dev/jobqueue": "other"}}),
            ("external IPs", {"externalIPs": ["203.0.113.7"]}),
            ("external name", {"type": "ExternalName", "externalName": "attacker.example",
                               "selector": None})]:
        forged = {**service, "spec": {k: v for k, v in {**service["spec"], **spec_change}.items()
                                      if v is not None}}
        answer = refused_by_policy(operator, "POST", f"/api/v1/namespaces/{ns}/services",
                                   forged, content_type="application/json")
        assert "ValidatingAdmissionPolicy" in answer and "denied request" in answer, (label,
                                                                                      answer)
    answer = refused_by_policy(operator, "POST", f"/api/v1/namespaces/{ns}/services?dryRun=All",
                               service, content_type="application/json")
    assert answer.endswith("accepted"), answer

    # The pods of a JobQueue's workers: the cost annotation and nothing else.
    pods: list[dict[str, Any]] = []

    def worker_pods() -> bool:
        pods[:] = cluster.items("pods", ns,
                                "antre.dev/jobqueue=owned,app.kubernetes.io/component=worker")
        return bool(pods)

    wait_until(worker_pods, timeout_s=SETTLE_S, interval_s=0.5, message="a worker pod")
    path = f"/api/v1/namespaces/{ns}/pods/{pods[0]['metadata']['name']}"
    answer = refused_by_policy(operator, "PATCH", path,
                               {"metadata": {"annotations": {cost: "7"}}})
    assert answer.endswith("accepted"), answer
    assert_refused(operator, "PATCH", path, {"metadata": {"annotations": {"x": "1"}}})
    assert_refused(operator, "PATCH", path, {"metadata": {"labels": {"app": "x"}}})
    container = pods[0]["spec"]["containers"][0]["name"]
    image = {"spec": {"containers": [{"name": container, "image": "docker.io/attacker/miner:1"}]}}
    assert_refused(operator, "PATCH", path, image,
                             content_type="application/strategic-merge-patch+json")


def _with(base: dict[str, Any], path: str, value: Any) -> dict[str, Any]:
    """A deep copy of ``base`` with ``value`` set at the dotted ``path`` (list items by index)."""
    copy: dict[str, Any] = json.loads(json.dumps(base))
    *parents, last = path.split(".")
    node: Any = copy
    for key in parents:
        node = node[int(key)] if isinstance(node, list) else node.setdefault(key, {})
    node[last] = value
    return copy


UNRESTRICTED = {
    # (the API server itself refuses privileged with allowPrivilegeEscalation false)
    "privileged": _with(_with(RESTRICTED_POD, "containers.0.securityContext.privileged", True),
                        "containers.0.securityContext.allowPrivilegeEscalation", True),
    "escalation allowed": _with(RESTRICTED_POD,
                                "containers.0.securityContext.allowPrivilegeEscalation", True),
    "capability added": _with(RESTRICTED_POD, "containers.0.securityContext.capabilities.add",
                              ["SYS_ADMIN"]),
    "host network": _with(RESTRICTED_POD, "hostNetwork", True),
    "host port": _with(RESTRICTED_POD, "containers.0.ports", [{"containerPort": 80,
                                                                "hostPort": 80}]),
    "hostPath volume": _with(RESTRICTED_POD, "volumes",
                             [{"name": "root", "hostPath": {"path": "/"}}]),
    "root user": _with(RESTRICTED_POD, "containers.0.securityContext.runAsUser", 0),
    "root allowed": _with(RESTRICTED_POD, "securityContext.runAsNonRoot", False),
    "seccomp unconfined": _with(RESTRICTED_POD, "securityContext.seccompProfile",
                                {"type": "Unconfined"}),
    "init container privileged": _with(RESTRICTED_POD, "initContainers", [
        {"name": "init", "image": "registry.k8s.io/pause:3.10",
         "securityContext": {"privileged": True}}]),
    "sysctls": _with(RESTRICTED_POD, "securityContext.sysctls",
                     [{"name": "net.ipv4.ip_unprivileged_port_start", "value": "0"}]),
}


def test_the_operators_token_writes_only_restricted_pod_templates(served: Served) -> None:
    """A Deployment or CronJob that passes for a JobQueue's child, in the JobQueue's own
    namespace, with a pod template that breaks the restricted Pod Security Standard: refused
    by the chart's admission policy, whatever the namespace itself enforces (none here). The
    same template made restricted is accepted: the refusals are the pod's, nothing else."""
    cluster, ns = served.cluster, served.namespace
    operator = operator_configuration(served)
    cluster.apply(jobqueue("templates", replicas=0, autoscaling={"enabled": False}), namespace=ns)
    wait_until(lambda: served.child("jobqueue", "templates"), message="the JobQueue")
    owner = served.child("jobqueue", "templates")
    assert owner is not None
    metadata = {"labels": {"app.kubernetes.io/managed-by": "antre-operator"},
                "ownerReferences": [{"apiVersion": "antre.dev/v1alpha1", "kind": "JobQueue",
                                     "name": "templates", "uid": owner["metadata"]["uid"]}]}

    def deployment(name: str, pod: dict[str, Any]) -> dict[str, Any]:
        return {"apiVersion": "apps/v1", "kind": "Deployment",
                "metadata": {**metadata, "name": name},
                "spec": {"replicas": 0, "selector": {"matchLabels": {"app": name}},
                         "template": {"metadata": {"labels": {"app": name}}, "spec": pod}}}

    deployments = f"/apis/apps/v1/namespaces/{ns}/deployments"
    refusals = {}
    for case, pod in UNRESTRICTED.items():
        refusals[case] = refused_by_policy(operator, "POST", deployments,
                                           deployment("unrestricted", pod),
                                           content_type="application/json")
    wrongly_accepted = [case for case, answer in refusals.items()
                        if not ("ValidatingAdmissionPolicy" in answer and "denied" in answer)]
    assert not wrongly_accepted, {case: refusals[case] for case in wrongly_accepted}
    assert "restricted Pod Security Standard" in refusals["hostPath volume"]
    assert cluster.get("deployment", "unrestricted", ns) is None

    unconfined = deployment("unrestricted", RESTRICTED_POD)
    unconfined["spec"]["template"]["metadata"]["annotations"] = {
        "container.apparmor.security.beta.kubernetes.io/main": "unconfined"}
    assert_refused(operator, "POST", deployments, unconfined, content_type="application/json")
    cronjob = {"apiVersion": "batch/v1", "kind": "CronJob",
               "metadata": {**metadata, "name": "unrestricted"},
               "spec": {"schedule": "* * * * *", "suspend": True, "jobTemplate": {"spec": {
                   "template": {"spec": {**UNRESTRICTED["hostPath volume"],
                                         "restartPolicy": "Never"}}}}}}
    assert_refused(operator, "POST", f"/apis/batch/v1/namespaces/{ns}/cronjobs", cronjob,
                   content_type="application/json")

    answer = refused_by_policy(operator, "POST", deployments,
                               deployment("restricted", RESTRICTED_POD),
                               content_type="application/json")
    assert answer.endswith("accepted"), answer
    cluster.kubectl("delete", "deployment", "restricted", "-n", ns, "--wait=false")
    cluster.kubectl("delete", "jobqueue", "templates", "-n", ns, "--wait=false")
