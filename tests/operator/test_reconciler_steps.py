"""One ``Reconciler.step`` at a time against a dict-backed API (``operator_fakes.FakeKube``).

Aspects: right after an operator restart (no child cached yet) the first step reads the live
worker Deployment before deciding, so it never scales down at once, neither with Redis up nor
with Redis down; a child is applied again only when the manifest or the child changed since the
last apply (at rest: no write), and a hand edit is put back with a Repaired Event; an object with
a child's name that is not ours is never adopted (applied to) nor deleted, also when it appeared
where the operator believed nothing was; in a namespace being
deleted, and for a JobQueue being deleted, a step recreates nothing and posts no Event (on a real
server the Event would be refused too, and kopf would retry it nine times).
"""

from __future__ import annotations

import copy
from typing import Any

import pytest
from antre_operator import handlers, kube, rendering, settings
from hostile_redis import depth_reply, flooding_server
from operator_fakes import JOBQUEUE_UID, FakeKube, closing, jobqueue_body, reconciler
from redis_servers import free_port

NS = "default"


def live_worker(fake: FakeKube, name: str, replicas: int) -> None:
    fake.put("Deployment", NS, f"{name}-worker", {
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"labels": {}, "ownerReferences": [
            {"apiVersion": "antre.dev/v1alpha1", "kind": "JobQueue", "name": name,
             "uid": JOBQUEUE_UID, "controller": True, "blockOwnerDeletion": True}]},
        "spec": {"replicas": replicas}})


def spec_for(url: str, **autoscaling: Any) -> dict[str, Any]:
    return {"redis": {"url": url},
            "autoscaling": {"minReplicas": 0, "maxReplicas": 10, **autoscaling}}


def worker_replicas(fake: FakeKube, name: str) -> int:
    live = fake.live("Deployment", NS, f"{name}-worker")
    assert live is not None
    return int(live["spec"]["replicas"])


async def test_first_step_after_restart_with_redis_down_keeps_live_replicas(
        monkeypatch: pytest.MonkeyPatch) -> None:
    fake = FakeKube()
    live_worker(fake, "q", 3)
    rec, events = reconciler(monkeypatch, fake, namespace=NS, name="q")
    body = jobqueue_body("q", NS, spec_for(f"redis://127.0.0.1:{free_port()}/0"))
    async with closing(rec):
        await rec.step(body)
    assert worker_replicas(fake, "q") == 3
    assert not [e for e in events if e["reason"] == "Scaled"]


async def test_first_step_after_restart_with_idle_queue_does_not_scale_down_at_once(
        monkeypatch: pytest.MonkeyPatch, redis_url: str) -> None:
    fake = FakeKube()
    live_worker(fake, "idle", 3)
    rec, events = reconciler(monkeypatch, fake, namespace=NS, name="idle")
    body = jobqueue_body("idle", NS, spec_for(redis_url, scaleDownStabilizationSeconds=60))
    async with closing(rec):
        await rec.step(body)
    # An empty queue recommends 0, but one stabilization window must pass first.
    assert worker_replicas(fake, "idle") == 3
    assert not [e for e in events if e["reason"] == "Scaled"]


async def test_a_child_is_applied_again_only_when_it_or_the_manifest_changed(
        monkeypatch: pytest.MonkeyPatch) -> None:
    fake = FakeKube()
    rec, events = reconciler(monkeypatch, fake, namespace=NS, name="rest")
    body = jobqueue_body("rest", NS, {"redis": {"url": f"redis://127.0.0.1:{free_port()}/0"},
                                      "autoscaling": {"enabled": False}, "replicas": 2})

    def child_writes() -> list[str]:
        return [w[1] for w in fake.writes() if "/status" not in w[1]]

    async with closing(rec):
        await rec.step(body)
        assert len(child_writes()) == 2  # the worker Deployment and the reaper CronJob
        await rec.step(body)
        await rec.step(body)
        assert len(child_writes()) == 2, "at rest: no write"

        # A hand edit (as the watch reports it) is applied over; the CronJob is left alone.
        path = kube.path_of("Deployment", NS, "rest-worker")
        fake.objects[path]["spec"]["replicas"] = 7
        fake._stamp(fake.objects[path])
        rec.state.remember_child(("Deployment", NS, "rest-worker"), fake.objects[path])
        await rec.step(body)
        assert child_writes()[2:] == [path]
        assert worker_replicas(fake, "rest") == 2
        assert [e for e in events if e["reason"] == "Repaired"]

        # A changed manifest is applied; then rest again.
        changed = jobqueue_body("rest", NS, {**body["spec"], "replicas": 3}, generation=2)
        await rec.step(changed)
        await rec.step(changed)
        assert child_writes()[3:] == [path]
        assert worker_replicas(fake, "rest") == 3


async def test_a_label_edited_away_is_put_back_when_an_older_answer_arrives_after_its_event(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Found by the e2e journey under load: the answer of an apply sent before a hand edit
    removed our label arrived after the DELETED event that edit caused (the object left our
    label-selected watch). The older answer replaced the "absent" view, so every later step saw
    our label at rest and wrote nothing, and no event of an object outside the watch came to
    correct it: the label stayed off for good."""
    fake = FakeKube()
    rec, _ = reconciler(monkeypatch, fake, namespace=NS, name="edited")
    body = jobqueue_body("edited", NS, {"redis": {"url": f"redis://127.0.0.1:{free_port()}/0"},
                                        "autoscaling": {"enabled": False}, "replicas": 2})
    key = ("Deployment", NS, "edited-worker")
    path = kube.path_of(*key)
    async with closing(rec):
        await rec.step(body)
        answer = copy.deepcopy(fake.objects[path])  # the apply's answer, still on its way
        del fake.objects[path]["metadata"]["labels"][settings.LABEL_MANAGED_BY]
        fake._stamp(fake.objects[path])
        left_watch = copy.deepcopy(answer)  # DELETED: the last view, at the edit's version
        left_watch["metadata"]["resourceVersion"] = fake.objects[path]["metadata"][
            "resourceVersion"]
        handlers._child_changed("Deployment", {"type": "DELETED", "object": left_watch},
                                left_watch, {"state": rec.state})
        rec.state.remember_child(key, answer)
        assert rec.state.children[key] is None, "an older answer hid the edit"
        await rec.step(body)
    labels = fake.objects[path]["metadata"]["labels"]
    assert labels.get(settings.LABEL_MANAGED_BY) == settings.MANAGED_BY


def stranger(fake: FakeKube, kind: str, name: str, owner_refs: list[dict[str, Any]]) -> None:
    fake.put(kind, NS, name, {"apiVersion": "apps/v1" if kind == "Deployment" else "v1",
                              "kind": kind,
                              "metadata": {"labels": {"app": "theirs"},
                                           "ownerReferences": owner_refs},
                              "spec": {"replicas": 7}})


@pytest.mark.parametrize("owner_refs", [
    pytest.param([], id="no-owner"),
    pytest.param([{"apiVersion": "apps/v1", "kind": "Thing", "name": "other", "uid": "uid-9",
                   "controller": True}], id="other-controller"),
])
async def test_a_strangers_object_is_not_adopted(monkeypatch: pytest.MonkeyPatch,
                                                 owner_refs: list[dict[str, Any]]) -> None:
    fake = FakeKube()
    stranger(fake, "Deployment", "mine-worker", owner_refs)
    rec, events = reconciler(monkeypatch, fake, namespace=NS, name="mine")
    body = jobqueue_body("mine", NS, {"redis": {"url": f"redis://127.0.0.1:{free_port()}/0"},
                                      "autoscaling": {"enabled": False}, "replicas": 1})
    async with closing(rec):
        await rec.step(body)
    assert not [w for w in fake.writes() if w[1].endswith("/deployments/mine-worker")]
    live = fake.live("Deployment", NS, "mine-worker")
    assert live is not None and live["spec"]["replicas"] == 7
    assert live["metadata"]["labels"] == {"app": "theirs"}
    [event] = [e for e in events if e["reason"] == "ApplyFailed"]
    assert event["type"] == "Warning" and "Deployment default/mine-worker" in event["message"]
    assert "not ours" in event["message"]
    status = fake.live("JobQueue", NS, "mine")  # no JobQueue object here: read the patch sent
    assert status is None
    [status_patch] = [w[2] for w in fake.requests if w[1].endswith("/jobqueues/mine/status")]
    ready = next(c for c in status_patch["status"]["conditions"] if c["type"] == "Ready")
    assert ready["status"] == "False" and "mine-worker" in ready["message"]


async def test_a_strangers_object_where_none_was_believed_is_not_applied_to() -> None:
    fake = FakeKube()
    stranger(fake, "Deployment", "q-worker", [])
    from operator_samples import MINIMAL, parse
    desired = rendering.render_worker_deployment(parse(MINIMAL), JOBQUEUE_UID, replicas=1)
    desired["metadata"]["name"], desired["metadata"]["namespace"] = "q-worker", NS
    with pytest.raises(kube.NotOwned, match="q-worker"):
        await fake.apply(desired, None)  # believed missing: read again before applying
    assert [m for m, _, _ in fake.requests] == ["GET"]


async def test_an_api_deployment_that_is_not_ours_is_not_deleted(
        monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    fake = FakeKube()
    stranger(fake, "Deployment", "app-api", [])
    rec, events = reconciler(monkeypatch, fake, namespace=NS, name="app")
    body = jobqueue_body("app", NS, {"redis": {"url": f"redis://127.0.0.1:{free_port()}/0"},
                                     "autoscaling": {"enabled": False}})
    async with closing(rec):
        await rec.step(body)
        await rec.step(body)
    assert fake.live("Deployment", NS, "app-api") is not None
    # Said once, not every poll.
    assert len([r for r in caplog.records if "not ours; not deleting" in r.getMessage()]) == 1
    assert len([e for e in events if e["reason"] == "NotOurs"]) == 1


class FlakyKube(FakeKube):
    """Fails the first ``times`` requests whose method and path end match."""

    def __init__(self, method: str, path_end: str, times: int = 1) -> None:
        super().__init__()
        self.flaky = (method, path_end)
        self.times = times

    async def request(self, method: str, path: str, **kwargs: Any) -> Any:
        if self.times and (method, path.endswith(self.flaky[1])) == (self.flaky[0], True):
            self.times -= 1
            self.requests.append((method, path, None))
            raise kube.KubeError(500, "etcdserver: request timed out")
        return await super().request(method, path, **kwargs)


async def test_an_unreadable_worker_deployment_is_not_patched(
        monkeypatch: pytest.MonkeyPatch) -> None:
    fake = FlakyKube("GET", "/deployments/q-worker")
    live_worker(fake, "q", 3)
    rec, events = reconciler(monkeypatch, fake, namespace=NS, name="q")
    body = jobqueue_body("q", NS, spec_for(f"redis://127.0.0.1:{free_port()}/0"))
    async with closing(rec):
        interval = await rec.step(body)  # the restart read fails; a later GET would work
    assert interval > 0
    assert worker_replicas(fake, "q") == 3
    assert not [w for w in fake.writes() if "/deployments/" in w[1]]
    assert [e for e in events if e["reason"] == "WorkerUnreadable"]
    assert not [e for e in events if e["reason"] == "Scaled"]


async def test_children_whose_events_came_before_their_jobqueues_are_read_by_its_first_step(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """At start the watches list children and JobQueues in any order, and the event of a child
    whose JobQueue is not served yet is not kept (``OperatorState.keeps_child``). The first
    step reads what it needs instead: the worker's replicas (Redis down: kept, never 0), and the
    reaper's last run for the status, also when no child could be applied (the API server
    failed the worker's apply here)."""
    fake = FlakyKube("PATCH", "/deployments/early-worker")
    live_worker(fake, "early", 3)
    fake.put("CronJob", NS, "early-reaper", {
        "apiVersion": "batch/v1", "kind": "CronJob",
        "metadata": {"labels": {settings.LABEL_MANAGED_BY: settings.MANAGED_BY,
                                settings.LABEL_JOBQUEUE: "early"},
                     "ownerReferences": [jobqueue_ref("early", JOBQUEUE_UID)]},
        "spec": {"schedule": "* * * * *"},
        "status": {"lastScheduleTime": "2030-01-01T00:01:00Z",
                   "lastSuccessfulTime": "2030-01-01T00:00:04Z"}})
    rec, _ = reconciler(monkeypatch, fake, namespace=NS, name="early")
    for kind, name in (("Deployment", "early-worker"), ("CronJob", "early-reaper")):
        live = fake.live(kind, NS, name)
        assert live is not None
        handlers._child_changed(kind, {"type": None, "object": live}, live, {"state": rec.state})
    assert rec.state.children == {}, "kept before the JobQueue is served"
    body = jobqueue_body("early", NS, spec_for(f"redis://127.0.0.1:{free_port()}/0"))
    rec.state.spec_changed(NS, "early", body["spec"])  # the JobQueue's own event
    async with closing(rec):
        await rec.step(body)
    [status_patch] = [w[2]["status"] for w in fake.requests if w[1].endswith("/early/status")]
    conditions = {c["type"]: c for c in status_patch["conditions"]}
    assert conditions["Ready"]["reason"] == "ApplyFailed"
    assert conditions["ReaperSucceeding"]["reason"] == "LastRunFailed"
    assert status_patch["desiredReplicas"] == 3


async def test_a_deleted_strangers_object_no_longer_blocks_nor_counts(
        monkeypatch: pytest.MonkeyPatch) -> None:
    fake = FakeKube()
    stranger(fake, "Deployment", "gone-worker", [])
    rec, events = reconciler(monkeypatch, fake, namespace=NS, name="gone")
    # Redis down: the autoscaler keeps "the current replicas", which must not be the stranger's.
    body = jobqueue_body("gone", NS, spec_for(f"redis://127.0.0.1:{free_port()}/0",
                                              minReplicas=1))
    async with closing(rec):
        await rec.step(body)
        assert [e for e in events if e["reason"] == "ApplyFailed"]
        [first] = [w[2]["status"] for w in fake.requests if w[1].endswith("/gone/status")]
        assert first["desiredReplicas"] == 1  # not the stranger's 7
        # The user deletes the stranger; our label-filtered watch never hears of it.
        del fake.objects[kube.path_of("Deployment", NS, "gone-worker")]
        await rec.step(body)
    live = fake.live("Deployment", NS, "gone-worker")
    assert live is not None and kube.controller_uid(live) == JOBQUEUE_UID
    assert live["spec"]["replicas"] == 1
    assert [e for e in events if e["reason"] == "Applied"]


def jobqueue_ref(name: str, uid: str, *, kind: str = "JobQueue",
                 api_version: str = "antre.dev/v1alpha1") -> dict[str, Any]:
    return {"apiVersion": api_version, "kind": kind, "name": name, "uid": uid,
            "controller": True, "blockOwnerDeletion": True}


async def test_a_recreated_jobqueue_adopts_the_children_of_its_predecessor(
        monkeypatch: pytest.MonkeyPatch) -> None:
    fake = FakeKube()
    # Deleted and recreated under the same name: the garbage collector has not run yet.
    stranger(fake, "Deployment", "re-worker", [jobqueue_ref("re", "old-uid")])
    rec, events = reconciler(monkeypatch, fake, namespace=NS, name="re")
    body = jobqueue_body("re", NS, spec_for(f"redis://127.0.0.1:{free_port()}/0",
                                            minReplicas=1))
    async with closing(rec):
        await rec.step(body)
    assert not [e for e in events if e["reason"] == "ApplyFailed"]
    live = fake.live("Deployment", NS, "re-worker")
    assert live is not None and kube.controller_uid(live) == JOBQUEUE_UID
    assert live["spec"]["replicas"] == 7  # Redis is down: what runs is kept


@pytest.mark.parametrize("ref", [
    pytest.param(jobqueue_ref("other", "old-uid"), id="another-jobqueue"),
    pytest.param(jobqueue_ref("re", "old-uid", api_version="example.com/v1"), id="other-group"),
    pytest.param(jobqueue_ref("re", "old-uid", kind="Thing"), id="other-kind"),
])
def test_only_a_same_named_jobqueue_child_is_adopted(ref: dict[str, Any]) -> None:
    from operator_samples import MINIMAL, parse
    desired = rendering.render_worker_deployment(parse(MINIMAL), JOBQUEUE_UID, replicas=1)
    desired["metadata"]["ownerReferences"][0]["name"] = "re"
    live = {"metadata": {"name": desired["metadata"]["name"], "ownerReferences": [ref]}}
    with pytest.raises(kube.NotOwned):
        kube.check_owned(desired, live)
    assert not kube.ours(live, jobqueue="re", uid=JOBQUEUE_UID)


def orphan(fake: FakeKube, name: str, labels: dict[str, str]) -> None:
    fake.put("Deployment", NS, name, {"apiVersion": "apps/v1", "kind": "Deployment",
                                      "metadata": {"labels": labels}, "spec": {"replicas": 5}})


async def test_children_orphaned_by_a_cascade_orphan_delete_are_adopted(
        monkeypatch: pytest.MonkeyPatch) -> None:
    fake = FakeKube()
    orphan(fake, "orph-worker", {"app.kubernetes.io/managed-by": "antre-operator",
                                 "antre.dev/jobqueue": "orph"})
    rec, events = reconciler(monkeypatch, fake, namespace=NS, name="orph")
    body = jobqueue_body("orph", NS, spec_for(f"redis://127.0.0.1:{free_port()}/0",
                                              minReplicas=1))
    async with closing(rec):
        await rec.step(body)
    assert not [e for e in events if e["reason"] == "ApplyFailed"]
    live = fake.live("Deployment", NS, "orph-worker")
    assert live is not None and kube.controller_uid(live) == JOBQUEUE_UID
    assert live["spec"]["replicas"] == 5  # Redis is down: what runs is kept


@pytest.mark.parametrize("owner_refs", [
    pytest.param([], id="orphaned"),
    pytest.param([jobqueue_ref("orph", "old-uid")], id="of-a-predecessor"),
])
async def test_an_adoptable_api_the_spec_no_longer_wants_is_deleted(
        monkeypatch: pytest.MonkeyPatch, owner_refs: list[dict[str, Any]]) -> None:
    """`kubectl delete jq --cascade=orphan` (or a delete and re-create before the garbage
    collector ran), then the JobQueue again without spec.api: its API Deployment and Service
    are this JobQueue's to adopt, as its worker and reaper are, so they go rather than run on
    with a NotOurs warning."""
    fake = FakeKube()
    labels = {"app.kubernetes.io/managed-by": "antre-operator", "antre.dev/jobqueue": "orph"}
    for kind in ("Deployment", "Service"):
        fake.put(kind, NS, "orph-api", {
            "apiVersion": "apps/v1" if kind == "Deployment" else "v1", "kind": kind,
            "metadata": {"labels": labels, "ownerReferences": owner_refs}, "spec": {}})
    rec, events = reconciler(monkeypatch, fake, namespace=NS, name="orph")
    body = jobqueue_body("orph", NS, spec_for(f"redis://127.0.0.1:{free_port()}/0"))
    async with closing(rec):
        await rec.step(body)
    assert fake.live("Deployment", NS, "orph-api") is None
    assert fake.live("Service", NS, "orph-api") is None
    assert not [e for e in events if e["reason"] == "NotOurs"]


@pytest.mark.parametrize("labels", [
    pytest.param({"antre.dev/jobqueue": "orph"}, id="not-managed-by-us"),
    pytest.param({"app.kubernetes.io/managed-by": "antre-operator",
                  "antre.dev/jobqueue": "other"}, id="another-jobqueue"),
])
async def test_an_unlabelled_or_foreign_orphan_is_not_adopted(
        monkeypatch: pytest.MonkeyPatch, labels: dict[str, str]) -> None:
    fake = FakeKube()
    orphan(fake, "orph-worker", labels)
    rec, events = reconciler(monkeypatch, fake, namespace=NS, name="orph")
    body = jobqueue_body("orph", NS, {"redis": {"url": f"redis://127.0.0.1:{free_port()}/0"},
                                      "autoscaling": {"enabled": False}, "replicas": 1})
    async with closing(rec):
        await rec.step(body)
    assert [e for e in events if e["reason"] == "ApplyFailed"]
    assert not [w for w in fake.writes() if w[1].endswith("/deployments/orph-worker")]


async def test_an_empty_env_value_does_not_cause_a_patch_every_poll(
        monkeypatch: pytest.MonkeyPatch) -> None:
    fake = FakeKube()
    rec, _ = reconciler(monkeypatch, fake, namespace=NS, name="env")
    body = jobqueue_body("env", NS, {
        "redis": {"url": f"redis://127.0.0.1:{free_port()}/0"},
        "autoscaling": {"enabled": False}, "replicas": 1,
        "worker": {"env": [{"name": "EMPTY", "value": ""}, {"name": "FULL", "value": "x"}]}})
    async with closing(rec):
        await rec.step(body)
        live = fake.live("Deployment", NS, "env-worker")
        assert live is not None
        # As the API server stores it: an empty string value is dropped.
        for item in live["spec"]["template"]["spec"]["containers"][0]["env"]:
            if item.get("value") == "":
                del item["value"]
        rec.state.remember_child(("Deployment", NS, "env-worker"), live)  # the watch event
        writes = len([w for w in fake.writes() if "/deployments/" in w[1]])
        await rec.step(body)
        await rec.step(body)
    assert len([w for w in fake.writes() if "/deployments/" in w[1]]) == writes
    env = {e["name"]: e for e in live["spec"]["template"]["spec"]["containers"][0]["env"]}
    assert env["EMPTY"] == {"name": "EMPTY"} and env["FULL"] == {"name": "FULL", "value": "x"}


class RefusingFieldPath(FakeKube):
    """Refuses a worker Deployment whose env has a fieldRef to ``metadata.bogus``, naming the
    container's env index as the API server does."""

    async def request(self, method: str, path: str, **kw: Any) -> Any:
        body = kw.get("body")
        if method == "PATCH" and path.endswith("-worker") and isinstance(body, dict):
            env = body["spec"]["template"]["spec"]["containers"][0]["env"]
            for index, item in enumerate(env):
                if (item.get("valueFrom") or {}).get("fieldRef", {}).get("fieldPath") == "metadata.bogus":
                    self.requests.append((method, path, body))
                    raise kube.KubeError(422, (
                        f'Deployment.apps "{body["metadata"]["name"]}" is invalid: spec.template.'
                        f"spec.containers[0].env[{index}].valueFrom.fieldRef.fieldPath: "
                        'Unsupported value: "metadata.bogus": supported values: "metadata.name"'))
        return await super().request(method, path, **kw)


async def test_an_env_entry_the_api_server_refuses_is_named_by_the_jobqueues_index(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Review finding: ApplyFailed named env[1x], an index counting the operator's own entries
    of the worker container, for a JobQueue with one or two entries."""
    fake = RefusingFieldPath()
    rec, events = reconciler(monkeypatch, fake, namespace=NS, name="bad")
    body = jobqueue_body("bad", NS, {
        "redis": {"url": f"redis://127.0.0.1:{free_port()}/0"},
        "autoscaling": {"enabled": False}, "replicas": 1,
        "worker": {"env": [{"name": "OK", "value": "1"},
                           {"name": "WHERE", "valueFrom": {"fieldRef": {
                               "fieldPath": "metadata.bogus"}}}]}})
    async with closing(rec):
        await rec.step(body)
    [status_patch] = [w[2]["status"] for w in fake.requests if w[1].endswith("/bad/status")]
    ready = next(c for c in status_patch["conditions"] if c["type"] == "Ready")
    assert ready["reason"] == "ApplyFailed"
    assert "(from spec.worker.env[1].valueFrom.fieldRef.fieldPath)" in ready["message"], ready
    [event] = [e for e in events if e["reason"] == "ApplyFailed"]
    assert "(from spec.worker.env[1].valueFrom.fieldRef.fieldPath)" in event["message"]


async def test_a_step_in_a_namespace_being_deleted_recreates_nothing_and_reports_nothing(
        monkeypatch: pytest.MonkeyPatch, redis_url: str) -> None:
    fake = FakeKube()
    fake.refuse_creates = kube.NamespaceTerminating(403, "the namespace is being terminated")
    rec, events = reconciler(monkeypatch, fake, namespace=NS, name="gone")
    async with closing(rec):
        await rec.step(jobqueue_body("gone", NS, spec_for(redis_url)))
    assert [r[0] for r in fake.writes()] == ["PATCH"], "one refused create, then nothing"
    assert events == []


async def test_a_step_for_a_jobqueue_being_deleted_writes_nothing(
        monkeypatch: pytest.MonkeyPatch, redis_url: str) -> None:
    fake = FakeKube()
    rec, events = reconciler(monkeypatch, fake, namespace=NS, name="going")
    body = jobqueue_body("going", NS, spec_for(redis_url))
    body["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    async with closing(rec):
        await rec.step(body)
    assert fake.requests == []
    assert events == []


async def test_the_reaper_cronjob_rests_while_no_worker_runs_and_redis_holds_nothing(
        monkeypatch: pytest.MonkeyPatch, redis_url: str, redis_client: Any) -> None:
    """Each run of the reaper CronJob is a Job and a pod: a queue at rest (no worker to run,
    nothing queued, scheduled or leased) suspends it; a job appearing wakes it; with workers it
    runs as before (a crash-looping pool reaps nothing itself); spec.reaper.suspend wins."""
    from antre import Queue

    fake = FakeKube()
    rec, _ = reconciler(monkeypatch, fake, namespace=NS, name="calm")

    def body(replicas: int, suspend: bool = False, generation: int = 1) -> dict[str, Any]:
        return jobqueue_body("calm", NS, {"redis": {"url": redis_url},
                                          "autoscaling": {"enabled": False}, "replicas": replicas,
                                          "reaper": {"suspend": suspend}}, generation=generation)

    def suspended() -> bool:
        live = fake.live("CronJob", NS, "calm-reaper")
        assert live is not None
        return bool(live["spec"]["suspend"])

    def writes() -> int:
        return len([w for w in fake.writes() if "/status" not in w[1]])

    async with closing(rec):
        await rec.step(body(0))
        assert suspended()
        before = writes()
        await rec.step(body(0))
        assert writes() == before, "at rest: no write"

        Queue(redis_client, "calm").enqueue("t", delay=3600)  # scheduled, not yet due
        await rec.step(body(0))
        assert not suspended()
        redis_client.flushall()
        await rec.step(body(0))
        assert suspended()

        # A dead letter: the reaper deletes it (and frees its idempotency key) after dead_ttl_s.
        redis_client.zadd("antre:{calm}:dead_letters", {"gone": 1})
        await rec.step(body(0))
        assert not suspended()
        redis_client.flushall()
        await rec.step(body(0))
        assert suspended()

        await rec.step(body(1, generation=2))
        assert not suspended()
        await rec.step(body(0, suspend=True, generation=3))
        assert suspended()


class RefusingStatus(FakeKube):
    """Refuses every status patch, as the API server does one over its size limits."""

    async def request(self, method: str, path: str, **kw: Any) -> Any:
        if method == "PATCH" and path.endswith("/status"):
            self.requests.append((method, path, kw.get("body")))
            raise kube.KubeError(413, "Request entity too large: limit is 3145728")
        return await super().request(method, path, **kw)


async def test_a_refused_status_is_not_sent_again_at_every_poll(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A status patch the API server refused is refused again: the same status is not sent at
    every poll (a JobQueue at rest causes no writes); a different one is sent at once."""
    fake = RefusingStatus()
    rec, _ = reconciler(monkeypatch, fake, namespace=NS, name="big")
    url = f"redis://127.0.0.1:{free_port()}/0"
    body = jobqueue_body("big", NS, {"redis": {"url": url},
                                     "autoscaling": {"enabled": False}, "replicas": 1})
    fake.put(settings.KIND, NS, "big", body)

    def status_writes() -> int:
        return len([w for w in fake.writes() if w[1].endswith("/status")])

    async with closing(rec):
        await rec.step(body)
        assert status_writes() == 1
        for _ in range(3):
            await rec.step(body)
        assert status_writes() == 1, "the same refused status, sent again at every poll"
        changed = jobqueue_body("big", NS, {"redis": {"url": url},
                                            "autoscaling": {"enabled": False}, "replicas": 2},
                                generation=2)
        await rec.step(changed)
        assert status_writes() == 2, "a different status is sent at once"


async def test_a_huge_count_from_redis_is_a_condition_not_a_failed_step(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A Redis of the JobQueue author's own answers the depth read with a 400-digit count: the
    step ends as for any Redis that does not answer as Redis (the status says so), instead of
    an OverflowError that left the last status standing, poll after poll."""
    fake = FakeKube()
    rec, events = reconciler(monkeypatch, fake, namespace=NS, name="huge")
    async with flooding_server(10, {b"EVALSHA": depth_reply(ready=b"9" * 400)}) as (port, _):
        body = jobqueue_body("huge", NS, {"redis": {"url": f"redis://127.0.0.1:{port}/0"},
                                          "autoscaling": {"enabled": False}, "replicas": 1})
        fake.put(settings.KIND, NS, "huge", body)
        async with closing(rec):
            await rec.step(body)
    live = fake.live(settings.KIND, NS, "huge")
    assert live is not None
    reachable = {c["type"]: c for c in live["status"]["conditions"]}["RedisReachable"]
    assert reachable["status"] == "False" and "no Redis answered" in reachable["message"]
    assert [e for e in events if e["reason"] == "RedisUnreachable"]
