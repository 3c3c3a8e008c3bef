"""The operator on a real API server, with exactly the rights the chart gives it.

In each mode (cluster-wide, and ``operator.watchNamespaces``) the chart is installed with helm
and the operator runs with a token of the chart's ServiceAccount (``serving.py``): every request
it makes is judged by the chart's RBAC, and a 403 (or any error) in its log fails the step.
Then, as README and docs/operator.md tell a user, with the real kubectl:

* ``kubectl create secret ... redis-url`` (the test's own redis-server) and ``kubectl apply -f
  examples/jobqueue.yaml``: the worker Deployment and the reaper CronJob appear, controlled by the
  JobQueue (ownerReferences with blockOwnerDeletion, accepted under the
  OwnerReferencesPermissionEnforcement admission plugin); ``Ready`` turns True once a worker pod
  runs (the test kubelet runs the worker pods, ``serving.py``), and a job enqueued is done;
* long jobs enqueued show in ``kubectl get jq`` (the printer columns: the backlog and the jobs
  the workers hold) and raise the desired replicas;
* examples/jobqueue-fixed.yaml (autoscaling off, API on): the API Deployment and Service appear;
  ``kubectl scale jq/reports --replicas=3`` goes through the /scale subresource and the worker
  Deployment follows;
* hand edits of a child (replicas, image, env, the operator's own label) are put back, labels
  others add are kept, a deleted child comes back (with a Repaired Event); fields removed from
  the spec are removed from every child while annotations others add stay (server-side apply);
  turning the API off removes its children;
* a child the merge-patching operator of earlier releases left behind (orphaned, its fields
  managed by ``antre-operator`` with operation Update) is adopted, and what the spec no longer
  has goes;
* ``kubectl delete jq``: the real garbage collector removes the children; ``--cascade=orphan``
  then re-creating the JobQueue: the children are adopted, not duplicated.

The writes at rest and deleting a namespace are in test_operator_cluster_wide.py.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
from antre_operator import kube, rendering, settings
from antre_operator import spec as jobqueue_spec
from redis_servers import wait_until

from .samples import example, jobqueue
from .serving import MODES, SETTLE_S, Served, serve


def controller_of(obj: dict[str, Any]) -> dict[str, Any]:
    refs = obj["metadata"].get("ownerReferences") or []
    assert len(refs) == 1, refs
    return dict(refs[0])


@pytest.fixture(scope="module", params=MODES)
def served(request: pytest.FixtureRequest, cluster: Any, crds: None,
           tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    with serve(cluster, str(request.param), tmp_path_factory.mktemp("served")) as served:
        yield served


@pytest.fixture(autouse=True)
def no_forbidden_requests(served: Served) -> Iterator[None]:
    """Any refusal by the API server, during any step, fails that step."""
    yield
    refused = served.refusals()
    assert not refused, "the operator was refused or failed:\n" + "\n".join(refused[-20:])


def test_example_jobqueue_gets_its_children_and_turns_ready(served: Served) -> None:
    cluster, ns = served.cluster, served.namespace
    cluster.kubectl("apply", "-f", "examples/jobqueue.yaml", "-n", ns)
    jq = served.wait_ready("emails")
    worker = served.wait_child("deployment", "emails-worker")
    reaper = served.wait_child("cronjob", "emails-reaper")
    for child in (worker, reaper):
        assert controller_of(child) == {
            "apiVersion": "antre.dev/v1alpha1", "kind": "JobQueue", "name": "emails",
            "uid": jq["metadata"]["uid"], "controller": True, "blockOwnerDeletion": True}
    assert served.child("deployment", "emails-api") is None, "spec.api.enabled is false"
    assert worker["spec"]["replicas"] == 1, "the example's minReplicas, nothing queued"
    assert jq["status"]["selector"] == "antre.dev/jobqueue=emails,app.kubernetes.io/component=worker"
    assert jq["status"]["readyReplicas"] == 1
    # The example runs a job on the stock handlers (issue 13: it used to crash-loop).
    queue = served.queue("emails")
    [sent] = queue.enqueue_many([("send_email", {"to": "ana@example.com"})])
    wait_until(lambda: str(queue.get(sent.job_id).status) == "done", timeout_s=SETTLE_S,
               interval_s=0.2, message="the example's job done by a worker pod")


def test_backlog_shows_in_kubectl_get_and_raises_desired_replicas(served: Served) -> None:
    cluster, ns = served.cluster, served.namespace
    # Jobs that outlast the module: 3 workers of concurrency 4 hold 12, 238 stay queued.
    served.queue("emails").enqueue_many([("sleep", {"seconds": 3600}) for _ in range(250)])
    served.wait_child("deployment", "emails-worker",
                      until=lambda d: d["spec"]["replicas"] == 3,
                      what="3 workers for 250 jobs at 100 per replica")

    def columns() -> dict[str, str]:
        out = cluster.kubectl("get", "jq", "emails", "-n", ns, "-o", "wide").stdout
        header, row = out.splitlines()
        return dict(zip(header.split(), row.split(), strict=True))

    table = wait_until(lambda: ((c := columns())["BACKLOG"], c["PROCESSING"]) == ("238", "12")
                       and c, timeout_s=SETTLE_S,
                       message="kubectl get jq showing 238 queued and 12 processing")
    assert isinstance(table, dict)
    assert table["READY"] == "True" and table["DESIRED"] == "3" and table["CURRENT"] == "3"
    assert table["REASON"] == "WorkersAvailable" and table["DEAD"] == "0"
    # The real ReplicaSet controller creates the pods; enforcing "restricted" lets them in.
    def worker_pods() -> list[str]:
        return [p["metadata"]["name"] for p in cluster.items(
            "pods", ns, "antre.dev/jobqueue=emails,app.kubernetes.io/component=worker")]

    try:
        wait_until(lambda: len(worker_pods()) == 3, timeout_s=SETTLE_S, message="3 worker pods")
    except AssertionError:
        raise AssertionError(f"{worker_pods()}\n" + cluster.kubectl(
            "get", "rs,events", "-n", ns, "-o", "wide").stdout) from None
    # Scaling is not a rollout: the pod template the operator created is the one it patches.
    assert len(cluster.items("replicasets", ns, "antre.dev/jobqueue=emails")) == 1


def test_fixed_jobqueue_with_api_scales_through_the_scale_subresource(
        served: Served) -> None:
    cluster, ns = served.cluster, served.namespace
    body = example("jobqueue-fixed")
    body["spec"]["redis"]["url"] = served.redis.url  # the example's host is in-cluster
    # The example's image and handlers stand for the user's own; the stock ones run here.
    del body["spec"]["worker"]["image"]
    body["spec"]["worker"]["handlers"] = "antre.example_handlers"
    cluster.kubectl("create", "secret", "generic", "reports-api", "-n", ns,
                    "--from-literal=token=s3cret-token")
    cluster.apply(body, namespace=ns)
    jq = served.wait_ready("reports")
    api = served.wait_child("deployment", "reports-api")
    service = served.wait_child("service", "reports-api")
    for child in (api, service):
        assert controller_of(child)["uid"] == jq["metadata"]["uid"]
    served.wait_child("deployment", "reports-worker", until=lambda d: d["spec"]["replicas"] == 2)

    cluster.kubectl("scale", "jq/reports", "--replicas=3", "-n", ns)
    served.wait_child("deployment", "reports-worker", until=lambda d: d["spec"]["replicas"] == 3,
                      what="the worker Deployment following kubectl scale")
    scale = cluster.wait_for("jq", "reports", ns, what="/scale status.replicas 3",
                             until=lambda _: json.loads(cluster.kubectl(
                                 "get", "jq", "reports", "-n", ns, "--subresource=scale",
                                 "-o", "json").stdout)["status"].get("replicas") == 3)
    assert scale["spec"]["replicas"] == 3
    answer = json.loads(cluster.kubectl("get", "jq", "reports", "-n", ns,
                                        "--subresource=scale", "-o", "json").stdout)
    assert answer["kind"] == "Scale" and answer["spec"]["replicas"] == 3
    scaling = next(c for c in scale["status"]["conditions"] if c["type"] == "Scaling")
    assert (scaling["status"], scaling["reason"]) == ("False", "Disabled")
    assert answer["status"]["selector"] == (
        "antre.dev/jobqueue=reports,app.kubernetes.io/component=worker")


def test_hand_edits_are_put_back_and_foreign_labels_kept(served: Served) -> None:
    cluster, ns = served.cluster, served.namespace
    cluster.kubectl("scale", "deployment/reports-worker", "--replicas=7", "-n", ns)
    cluster.kubectl("set", "image", "deployment/reports-worker", "worker=busybox:latest",
                    "-n", ns)
    cluster.kubectl("set", "env", "deployment/reports-worker", "ANTRE_CONCURRENCY=99", "-n", ns)
    cluster.kubectl("label", "deployment/reports-worker", "team=media", "-n", ns)
    # Without the label the Deployment leaves the operator's label-selected watch (DELETED).
    cluster.kubectl("label", "deployment/reports-worker", f"{settings.LABEL_MANAGED_BY}-",
                    "-n", ns)

    applied = cluster.get("jobqueue", "reports", ns)
    assert applied is not None
    worker_spec = jobqueue_spec.parse_jobqueue(name="reports", namespace=ns,
                                               spec=applied["spec"]).worker

    def repaired(deployment: dict[str, Any]) -> bool:
        container = deployment["spec"]["template"]["spec"]["containers"][0]
        env = {e["name"]: e.get("value") for e in container["env"]}
        labels = deployment["metadata"]["labels"]
        return (deployment["spec"]["replicas"] == 3 and container["image"] == worker_spec.image
                and labels.get(settings.LABEL_MANAGED_BY) == settings.MANAGED_BY
                and env.get("ANTRE_CONCURRENCY") == str(worker_spec.concurrency))

    worker = served.wait_child("deployment", "reports-worker", until=repaired,
                               what="the hand edits put back")
    assert worker["metadata"]["labels"]["team"] == "media", "labels others add are kept"

    uid = served.wait_child("service", "reports-api")["metadata"]["uid"]
    cluster.kubectl("delete", "service", "reports-api", "-n", ns)
    served.wait_child("service", "reports-api", until=lambda s: s["metadata"]["uid"] != uid,
                      what="the deleted Service re-created")
    repaired_events = cluster.items("events", ns)
    assert any(e["reason"] == "Repaired" and e["involvedObject"]["name"] == "reports"
               for e in repaired_events), "a Repaired Event on the JobQueue"


def pod_templates(served: Served, name: str) -> list[dict[str, Any]]:
    """The pod templates of JobQueue ``name``'s workers, reaper and API."""
    worker = served.child("deployment", f"{name}-worker") or {}
    reaper = served.child("cronjob", f"{name}-reaper") or {}
    api = served.child("deployment", f"{name}-api") or {}
    return [worker.get("spec", {}).get("template") or {},
            ((reaper.get("spec", {}).get("jobTemplate") or {}).get("spec") or {})
            .get("template") or {},
            api.get("spec", {}).get("template") or {}]


def test_fields_removed_from_the_spec_are_removed_from_the_children(served: Served) -> None:
    cluster, ns = served.cluster, served.namespace
    extras = {"nodeSelector": {"pool": "batch"},
              "tolerations": [{"key": "batch", "operator": "Exists", "effect": "NoSchedule"}],
              "podAnnotations": {"team": "media", "prometheus.io/scrape": "true"}}
    cluster.kubectl("patch", "jq", "reports", "-n", ns, "--type=merge",
                    "-p", json.dumps({"spec": {"worker": extras}}))
    wait_until(lambda: all(t.get("spec", {}).get("nodeSelector") == {"pool": "batch"}
                           and (t["metadata"].get("annotations") or {}).get("team") == "media"
                           for t in pod_templates(served, "reports")),
               timeout_s=SETTLE_S, message="the scheduling fields on every child")
    # Someone else's annotation on a pod template stays through every later apply.
    cluster.kubectl("rollout", "restart", "deployment/reports-worker", "-n", ns)

    cluster.kubectl("patch", "jq", "reports", "-n", ns, "--type=merge", "-p", json.dumps(
        {"spec": {"worker": {"nodeSelector": None, "tolerations": None,
                             "podAnnotations": {"prometheus.io/scrape": None}}}}))

    def cleaned(template: dict[str, Any]) -> bool:
        pod = template.get("spec") or {}
        annotations = dict(template.get("metadata", {}).get("annotations") or {})
        annotations.pop("kubectl.kubernetes.io/restartedAt", None)
        return ("nodeSelector" not in pod and "tolerations" not in pod
                and annotations == {"team": "media"})

    wait_until(lambda: all(cleaned(t) for t in pod_templates(served, "reports")),
               timeout_s=SETTLE_S, message="the removed fields gone from every child")
    worker_template = pod_templates(served, "reports")[0]
    assert "kubectl.kubernetes.io/restartedAt" in worker_template["metadata"]["annotations"]


def test_turning_the_api_off_removes_its_children(served: Served) -> None:
    cluster, ns = served.cluster, served.namespace
    cluster.kubectl("patch", "jq", "reports", "-n", ns, "--type=merge",
                    "-p", '{"spec": {"api": {"enabled": false}}}')
    cluster.wait_gone("deployment", "reports-api", ns, timeout_s=SETTLE_S)
    cluster.wait_gone("service", "reports-api", ns, timeout_s=SETTLE_S)
    api_on = {"spec": {"api": {"enabled": True}}}
    cluster.kubectl("patch", "jq", "reports", "-n", ns, "--type=merge", "-p", json.dumps(api_on))
    served.wait_child("deployment", "reports-api", what="the API Deployment back")


def test_delete_lets_the_garbage_collector_remove_the_children(served: Served) -> None:
    cluster, ns = served.cluster, served.namespace
    # Foreground: the JobQueue stays (with a deletionTimestamp) until the garbage collector
    # has removed every child; an operator recreating them would make this hang.
    cluster.kubectl("delete", "jq", "reports", "-n", ns, "--cascade=foreground", "--wait=true",
                    f"--timeout={SETTLE_S:.0f}s")
    for kind, name in [("deployment", "reports-worker"), ("cronjob", "reports-reaper"),
                       ("deployment", "reports-api"), ("service", "reports-api")]:
        cluster.wait_gone(kind, name, ns, timeout_s=SETTLE_S)


def test_orphaned_children_are_adopted_by_a_new_jobqueue(served: Served) -> None:
    cluster, ns = served.cluster, served.namespace
    old_uid = served.wait_ready("emails")["metadata"]["uid"]
    cluster.kubectl("delete", "jq", "emails", "-n", ns, "--cascade=orphan", "--wait=true",
                    f"--timeout={SETTLE_S:.0f}s")
    orphan = served.wait_child("deployment", "emails-worker",
                               until=lambda d: not d["metadata"].get("ownerReferences"),
                               what="the orphaned worker Deployment without owner")
    assert orphan["spec"]["replicas"] == 3
    cluster.kubectl("apply", "-f", "examples/jobqueue.yaml", "-n", ns)
    new_uid = served.wait_ready("emails")["metadata"]["uid"]
    assert new_uid != old_uid
    for kind, name in [("deployment", "emails-worker"), ("cronjob", "emails-reaper")]:
        adopted = served.wait_child(kind, name,
                                    until=lambda o: (o["metadata"].get("ownerReferences") or
                                                     [{}])[0].get("uid") == new_uid,
                                    what=f"{kind} {name} adopted")
        assert controller_of(adopted)["controller"] is True
    assert len(cluster.items("deployments", ns, "antre.dev/jobqueue=emails")) == 1


def test_a_child_of_an_earlier_operator_release_is_taken_over_cleanly(served: Served) -> None:
    """Before server-side apply the operator merge-patched: the API server recorded its fields
    as managed by ``antre-operator`` with operation Update, and an apply alone would never
    remove them. Such a worker Deployment, orphaned, with a nodeSelector, a pod annotation and
    the annotation that listed the operator's pod annotations, is adopted by a new JobQueue
    whose spec has none of them: all three go; a label someone else added stays."""
    cluster, ns = served.cluster, served.namespace
    # Handlers that exist, so that its worker runs and the JobQueue turns Ready.
    handlers = "antre.example_handlers"
    body = jobqueue("legacy", replicas=1, autoscaling={"enabled": False},
                    worker={"handlers": handlers})
    old_spec = jobqueue_spec.parse_jobqueue(name="legacy", namespace=ns, spec={
        **body["spec"], "worker": {"handlers": handlers, "nodeSelector": {"pool": "batch"},
                                   "podAnnotations": {"old": "yes"}}})
    left = rendering.render_worker_deployment(old_spec, "gone-uid", replicas=1)
    del left["metadata"]["ownerReferences"]  # orphaned: kubectl delete --cascade=orphan
    left["metadata"]["annotations"] = {"antre.dev/pod-annotation-keys": "old"}
    cluster.kubectl("create", "-f", "-", "-n", ns, f"--field-manager={kube.FIELD_MANAGER}",
                    input=json.dumps(left))
    cluster.kubectl("label", "deployment/legacy-worker", "team=media", "-n", ns)

    cluster.apply(body, namespace=ns)
    uid = served.wait_ready("legacy")["metadata"]["uid"]

    def taken_over(deployment: dict[str, Any]) -> bool:
        template = deployment["spec"]["template"]
        managers = {(m["manager"], m["operation"])
                    for m in deployment["metadata"].get("managedFields") or []
                    if not m.get("subresource")}
        return ((deployment["metadata"].get("ownerReferences") or [{}])[0].get("uid") == uid
                and "nodeSelector" not in template["spec"]
                and "old" not in (template["metadata"].get("annotations") or {})
                and "antre.dev/pod-annotation-keys" not in (
                    deployment["metadata"].get("annotations") or {})
                and (kube.FIELD_MANAGER, "Update") not in managers)

    worker = served.wait_child("deployment", "legacy-worker", until=taken_over,
                               what="the earlier release's child adopted and cleaned")
    assert worker["metadata"]["labels"]["team"] == "media"
    assert len(cluster.items("deployments", ns, "antre.dev/jobqueue=legacy")) == 1
