"""Autoscaling by backlog on the real control plane, with real worker processes as pods.

The chart is installed and its operator runs with the chart's RBAC, polling every second
(``serving.py``); the real Deployment, ReplicaSet, CronJob and Job controllers act, and the test
kubelet (``kubelet.py``) runs every pod they create as a real ``antre worker`` or
``antre reaper --once`` process. JobQueues run the example handlers' ``sleep`` jobs with short
windows (``autoscaling.fast_jobqueue``). Each scenario prints its timeline and adds it to the
run's summary: enqueue, the operator's decision, the Deployment change (audit log), pods started
and Ready, first job done, drain done.

* **Scale up**: a backlog raises the replicas within one polling interval of the enqueue; the
  new pods run, the jobs drain, every job ends done on its first attempt.
* **Idle-first scale-down**: two workers busy with long jobs, two idle, nothing queued: the
  operator marks pod-deletion-cost, the real ReplicaSet controller deletes the two idle pods,
  and no running job is interrupted or released (job histories, worker logs).
* **Every worker busy**: maxReplicas lowered under two busy workers: the removed worker
  releases its job at the end of its grace period, without spending an attempt, and the job
  is finished by the other worker.
* **To zero and back**: after the cooldown with nothing processing the replicas go to 0 and
  every worker process exits 0; a new job wakes a worker and is done.
* **Operator killed mid-scale** (SIGKILL) and a new one started: it carries on with the same
  children (nothing created, no new ReplicaSet) and every job is done once.
* **Redis stopped** for several polling intervals with jobs running and waiting: the replicas
  stay, the JobQueue says Redis is unreachable (condition and Event), and all recovers when
  Redis is back (its append-only file kept), no job lost.
* **A worker SIGKILLed holding a lease**: the kubelet restarts it, the lease expires, the job is
  requeued (by a worker's reaper or the reaper CronJob's Job) and done on its second attempt;
  the real cronjob controller's reaper Jobs run ``antre reaper --once`` to Succeeded.
"""

from __future__ import annotations

import calendar
import json
import signal
import time
from collections.abc import Iterator
from typing import Any

import pytest
from redis_servers import wait_until

from .autoscaling import POLLING_S, Autoscaled, Timeline, done_at, events, fast_jobqueue
from .cluster import Cluster
from .serving import condition, serve

#: Slack on top of one polling interval for the scale-up reaction on a loaded 2-core machine.
REACTION_SLACK_S = 1.0
#: The JobQueue whose reaper CronJob runs: created with the module, so the real cronjob
#: controller has passed a minute boundary by the time the last scenario looks at its Jobs.
REAPED = "reaped"


@pytest.fixture(scope="module")
def autoscaled(cluster: Cluster, crds: None,
               tmp_path_factory: pytest.TempPathFactory) -> Iterator[Autoscaled]:
    if cluster.control_plane is None:
        pytest.skip("the test kubelet runs pods on the suite's own control plane only; "
                    "a cluster of your own has kubelets of its own")
    workdir = tmp_path_factory.mktemp("autoscaling")
    with serve(cluster, "cluster-wide", workdir, appendonly=True, pods="") as served:
        assert served.kubelet is not None
        env = Autoscaled(served, served.kubelet, workdir)
        try:
            env.apply(fast_jobqueue(REAPED, concurrency=1, min_replicas=1, max_replicas=1,
                                    visibility_s=5, reaper=True))
            yield env
        finally:
            env.close()


@pytest.fixture(autouse=True)
def nothing_refused(autoscaled: Autoscaled) -> Iterator[None]:
    yield
    problems = autoscaled.served.refusals()
    assert not problems, "\n".join(problems[-20:])


def test_scale_up_within_one_polling_interval(autoscaled: Autoscaled,
                                              figures: list[str]) -> None:
    env = autoscaled
    body = fast_jobqueue("burst", concurrency=2, min_replicas=1, max_replicas=4, target=10,
                         stabilization_s=30)
    with env.jobqueue(body) as name:
        first = env.wait_ready_pods(name, 1)
        timeline = Timeline("scale up: 40 jobs of 0.5 s, 10 per replica, 2 slots per pod")
        enqueued = timeline.mark("enqueued 40 jobs (1 worker pod running)")
        ids = env.enqueue_sleeps(name, [0.5] * 40)
        env.wait_replicas(name, 4)
        pods = env.wait_ready_pods(name, 4)
        jobs = env.wait_jobs(name, ids)

        decision = next(d for d in env.decisions(name) if d.at >= enqueued - 0.1)
        timeline.mark(f"operator decides {decision.before} -> {decision.after} "
                      f"({decision.reason})", decision.at)
        patch = env.operator_writes(enqueued, "deployments", f"{name}-worker")[0]
        timeline.mark("worker Deployment replicas 1 -> 4 (the operator's patch, audit log)",
                      patch.at)
        new_pods = sorted(set(pods) - set(first))
        for what in ("started", "ready"):
            for event in env.pod_events(name, what, since=enqueued):
                timeline.mark(f"pod {event.pod} {'process started' if what == 'started' else 'Ready'}",
                              event.at)
        finished = sorted(done_at(job) for job in jobs)
        timeline.mark("first job done", finished[0])
        timeline.mark("drain done (40 jobs)", finished[-1])
        timeline.report(figures)

        reaction = patch.at - enqueued
        started = min(e.at for e in env.pod_events(name, "started", since=enqueued))
        ready = sorted(e.at for e in env.pod_events(name, "ready", since=enqueued))
        figures.append(
            f"scale up: backlog to Deployment change {reaction:.2f} s (polling {POLLING_S:g} s), "
            f"to a new worker process started {started - enqueued:.2f} s, to 3 new pods Ready "
            f"{ready[-1] - enqueued:.2f} s, drain of 40 jobs done {finished[-1] - enqueued:.2f} s")
        assert reaction <= POLLING_S + REACTION_SLACK_S, f"{reaction:.2f} s"
        assert (decision.before, decision.after) == (1, 4)
        assert len(new_pods) == 3 and len(ready) == 3
        assert all(job.attempt == 1 and not events(job, "released", "lease_expired")
                   for job in jobs)
        worker = env.worker(name)
        assert worker["status"].get("readyReplicas") == 4, worker["status"]


def test_scale_down_removes_idle_workers_first(autoscaled: Autoscaled,
                                               figures: list[str]) -> None:
    env = autoscaled
    # A stabilization window longer than a worker pod takes to start here, so the pool stays at
    # 4 until every pod is Ready (a lower recommendation while pods start is no idle capacity).
    body = fast_jobqueue("idle-first", concurrency=1, max_replicas=4, target=1,
                         stabilization_s=6)
    with env.jobqueue(body) as name:
        timeline = Timeline("idle-first scale-down: 2 long jobs, 2 short ones, 1 slot per pod")
        enqueued = timeline.mark("enqueued 2 jobs of 0.2 s and 2 of 15 s")
        short_ids = env.enqueue_sleeps(name, [0.2, 0.2])
        long_ids = env.enqueue_sleeps(name, [15, 15])
        env.wait_replicas(name, 4)
        env.wait_jobs(name, short_ids)
        running = env.wait_jobs(name, long_ids, "processing", timeout_s=60)
        owners = env.pods_of_workers(name)
        busy = {owners[str(job.worker)] for job in running}
        assert len(busy) == 2, "one slot per pod: each long job on its own pod"

        env.wait_replicas(name, 2, timeout_s=30)
        scaled_down = next(d for d in env.decisions(name) if d.after == 2)
        deployment_patch = next(w for w in env.operator_writes(enqueued, "deployments")
                                if w.at >= scaled_down.at - 0.5)
        wait_until(lambda: len(env.pod_events(name, "deleted", since=enqueued)) == 2,
                   timeout_s=30, interval_s=0.2, message="two pods deleted by the kubelet")
        deleted = {e.pod for e in env.pod_events(name, "deleted", since=enqueued)}
        cost_patches = [w for w in env.operator_writes(enqueued, "pods")
                        if w.at <= deployment_patch.at]
        done = env.wait_jobs(name, long_ids, timeout_s=40)

        timeline.mark(f"operator decides 4 -> 2 ({scaled_down.reason})", scaled_down.at)
        for write in cost_patches:
            timeline.mark(f"pod-deletion-cost set on {write.name} (audit log)", write.at)
        timeline.mark("worker Deployment replicas 4 -> 2 (audit log)", deployment_patch.at)
        for what in ("sigterm", "exited", "deleted"):
            for event in env.pod_events(name, what, since=enqueued):
                timeline.mark(f"pod {event.pod}: {what} {event.detail}".rstrip(), event.at)
        for job in done:
            timeline.mark(f"long job {job.id} done by {owners[str(job.worker)]}", done_at(job))
        timeline.report(figures)

        assert deleted.isdisjoint(busy), f"busy pods {busy} deleted: {deleted}"
        assert {w.name for w in cost_patches} >= deleted | busy, "costs written before scaling"
        survivors = {p["metadata"]["name"]: p for p in env.pods(name)}
        assert set(survivors) == busy
        assert {p["metadata"]["annotations"]["controller.kubernetes.io/pod-deletion-cost"]
                for p in survivors.values()} == {"1"}
        for pod in deleted:
            log = env.worker_log(pod)
            stopping = [e for e in log if e.get("msg") == "stopping"]
            assert stopping and stopping[0]["in_flight"] == 0, f"{pod} was idle when stopped"
            assert any(e.get("msg") == "worker stopped" for e in log)
            assert not [e for e in log if e.get("event") in ("released", "lease_lost")]
            assert env.kubelet.run_of(env.namespace, pod).last_exit == 0  # type: ignore[union-attr]
        for job in done:  # not interrupted: one claim, one ack, by the same worker
            assert job.attempt == 1
            assert [e.event for e in events(job, "claimed", "released", "lease_expired",
                                            "acked")] == ["claimed", "acked"], job.history
            assert events(job, "claimed")[0].worker == events(job, "acked")[0].worker
        for pod in busy:
            assert not env.pod_events(name, "sigterm") or pod not in {
                e.pod for e in env.pod_events(name, "sigterm")}
        figures.append("idle-first scale-down: 4 -> 2 with 2 long jobs running: the 2 idle "
                          "pods deleted, 0 jobs interrupted or released")


def test_scale_down_under_busy_workers_releases_without_spending_an_attempt(
        autoscaled: Autoscaled, figures: list[str]) -> None:
    env = autoscaled
    # Lowering maxReplicas applies at the next poll, whatever the stabilization window (which
    # keeps the second pod while it starts).
    body = fast_jobqueue("all-busy", concurrency=1, max_replicas=2, target=1, stabilization_s=6)
    with env.jobqueue(body) as name:
        timeline = Timeline("every worker busy: maxReplicas 2 -> 1 under 2 jobs of 10 s")
        ids = env.enqueue_sleeps(name, [10, 10])
        timeline.mark("enqueued 2 jobs of 10 s")
        env.wait_jobs(name, ids, "processing", timeout_s=60)
        lowered = timeline.mark("maxReplicas lowered to 1")
        env.patch(name, {"autoscaling": {"maxReplicas": 1}})
        env.wait_replicas(name, 1)
        jobs = env.wait_jobs(name, ids, timeout_s=60)
        owners = env.pods_of_workers(name)

        released = [job for job in jobs if events(job, "released")]
        assert len(released) == 1, [job.history for job in jobs]
        job = released[0]
        first_claim, release = events(job, "claimed")[0], events(job, "released")[0]
        last_claim = events(job, "claimed")[-1]
        for event in env.pod_events(name, "sigterm", since=lowered):
            timeline.mark(f"pod {event.pod}: SIGTERM ({event.detail})", event.at)
        timeline.mark(f"job {job.id} released by {owners[str(release.worker)]}",
                      release.at_ms / 1000)
        timeline.mark(f"job {job.id} claimed again by {owners[str(last_claim.worker)]}",
                      last_claim.at_ms / 1000)
        for finished in jobs:
            timeline.mark(f"job {finished.id} done (attempt {finished.attempt})",
                          done_at(finished))
        timeline.report(figures)

        assert all(j.attempt == 1 for j in jobs), "a release gives the attempt back"
        assert last_claim.worker != first_claim.worker, "finished elsewhere"
        assert release.attempt == 1 and last_claim.attempt == 1
        removed = owners[str(release.worker)]
        log = env.worker_log(removed)
        assert [e["job_id"] for e in log if e.get("event") == "released"] == [job.id]
        assert env.kubelet.run_of(env.namespace, removed).last_exit == 0  # type: ignore[union-attr]
        figures.append(f"every worker busy: the removed worker released its job after its "
                          f"grace period; done elsewhere on attempt {job.attempt}")


def test_scale_to_zero_and_back(autoscaled: Autoscaled, figures: list[str]) -> None:
    env = autoscaled
    body = fast_jobqueue("sleeper", concurrency=2, max_replicas=2, target=5, stabilization_s=2,
                         cooldown_s=3)
    with env.jobqueue(body) as name:
        assert env.replicas(name) == 0, "nothing queued: no worker"
        timeline = Timeline("to zero and back: cooldown 3 s, stabilization 2 s")
        ids = env.enqueue_sleeps(name, [0.3] * 4)
        first_enqueue = timeline.mark("enqueued 4 jobs at zero replicas")
        first = env.wait_jobs(name, ids)
        timeline.mark("4 jobs done", max(done_at(j) for j in first))
        env.wait_replicas(name, 0, timeout_s=30)
        wait_until(lambda: not env.pods(name), timeout_s=30, interval_s=0.2,
                   message="the worker pods gone")
        to_zero = next(d for d in env.decisions(name) if d.after == 0)
        timeline.mark(f"operator decides 1 -> 0 ({to_zero.reason})", to_zero.at)
        for event in env.pod_events(name, "exited", since=first_enqueue):
            timeline.mark(f"pod {event.pod}: {event.detail}", event.at)
        exits = {e.pod: e.detail for e in env.pod_events(name, "exited")}
        assert exits and set(exits.values()) == {"exit code 0"}, exits
        for pod in exits:
            assert any(e.get("msg") == "worker stopped" for e in env.worker_log(pod))

        again = timeline.mark("enqueued 1 job at zero replicas")
        (job,) = env.wait_jobs(name, env.enqueue_sleeps(name, [0]), timeout_s=30)
        woke = next(d for d in env.decisions(name) if d.at >= again - 0.1 and d.after == 1)
        timeline.mark(f"operator decides 0 -> 1 ({woke.reason})", woke.at)
        for what in ("started", "ready"):
            for event in env.pod_events(name, what, since=again):
                timeline.mark(f"pod {event.pod} {what}", event.at)
        timeline.mark("the job done", done_at(job))
        timeline.report(figures)
        figures.append(f"from zero: enqueue to job done {done_at(job) - again:.2f} s "
                          f"(polling {POLLING_S:g} s; a worker process started and Ready)")
        assert job.attempt == 1


def test_operator_killed_mid_scale_is_replaced_without_duplicates(
        autoscaled: Autoscaled, figures: list[str]) -> None:
    env = autoscaled
    body = fast_jobqueue("steps", concurrency=2, min_replicas=1, max_replicas=4, target=5,
                         stabilization_s=30, max_step=1)
    with env.jobqueue(body) as name:
        env.wait_ready_pods(name, 1)
        uid = env.cluster.get("jobqueue", name, env.namespace)["metadata"]["uid"]  # type: ignore[index]
        timeline = Timeline("operator SIGKILLed mid-scale (1 -> 4, one step per poll)")
        enqueued = timeline.mark("enqueued 60 jobs of 1 s")
        ids = env.enqueue_sleeps(name, [1] * 60)
        wait_until(lambda: env.replicas(name) >= 2, timeout_s=10, interval_s=0.1,
                   message="the first step up")
        killed_at = env.replicas(name)
        env.served.operator.stop(sig=signal.SIGKILL)
        killed = timeline.mark(f"operator SIGKILLed at {killed_at} replicas")
        env.served.restart_operator(env.workdir / "operator-2.log")
        timeline.mark("a new operator process authenticated")
        env.wait_replicas(name, 4, timeout_s=30)
        jobs = env.wait_jobs(name, ids, timeout_s=90)

        for write in env.operator_writes(enqueued, "deployments", f"{name}-worker"):
            timeline.mark("worker Deployment patched by the operator (audit log)", write.at)
        finished = sorted(done_at(j) for j in jobs)
        timeline.mark("drain done (60 jobs)", finished[-1])
        timeline.report(figures)

        # A server-side apply that creates answers 201 Created.
        created = [w for kind in ("deployments", "cronjobs", "services", "replicasets")
                   for w in env.operator_writes(killed, kind) if w.code == 201]
        assert not created, created
        assert env.operator_writes(killed, "deployments", f"{name}-worker"), "it carried on"
        for kind in ("deployments", "cronjobs", "replicasets"):
            children = env.cluster.items(kind, env.namespace, f"antre.dev/jobqueue={name}")
            assert len(children) == 1, (kind, [c["metadata"]["name"] for c in children])
        for kind in ("deployments", "cronjobs"):
            (child,) = env.cluster.items(kind, env.namespace, f"antre.dev/jobqueue={name}")
            assert child["metadata"]["ownerReferences"][0]["uid"] == uid
        assert all(j.attempt == 1 and not events(j, "released", "lease_expired") for j in jobs)
        figures.append(f"operator SIGKILLed at {killed_at} of 4 replicas: the new one carried "
                          f"on to 4, created nothing, 60 of 60 jobs done once")


def test_redis_outage_keeps_the_replicas_and_recovers(autoscaled: Autoscaled,
                                                      figures: list[str]) -> None:
    env = autoscaled
    body = fast_jobqueue("outage", concurrency=1, min_replicas=1, max_replicas=3, target=1,
                         stabilization_s=2, visibility_s=60)
    with env.jobqueue(body) as name:
        ids = env.enqueue_sleeps(name, [5] * 6)
        wait_until(lambda: sum(str(j.status) == "processing" for j in env.jobs(name, ids)) == 3,
                   timeout_s=60, interval_s=0.2, message="3 jobs running, 3 waiting")
        timeline = Timeline("Redis stopped for 6 s: 3 workers busy, 3 jobs waiting "
                            "(stabilization 2 s)")
        stopped = timeline.mark("redis-server stopped")
        env.served.redis.shutdown()
        try:
            jq = env.cluster.wait_for(
                "jobqueue", name, env.namespace, timeout_s=15,
                until=lambda o: condition(o, "RedisReachable") == "False",
                what="RedisReachable False")
            timeline.mark("JobQueue condition RedisReachable False")
            time.sleep(max(0.0, stopped + 6 - time.time()))  # the outage lasts 6 s
            assert condition(jq, "Ready") == "False"
            assert env.replicas(name) == 3
        finally:
            env.served.redis.start()
        back = timeline.mark("redis-server started again (append-only file kept)")
        env.cluster.wait_for("jobqueue", name, env.namespace, timeout_s=15,
                             until=lambda o: condition(o, "RedisReachable") == "True",
                             what="RedisReachable True again")
        timeline.mark("JobQueue condition RedisReachable True")
        jobs = env.wait_jobs(name, ids, timeout_s=60)
        for job in jobs:
            timeline.mark(f"job {job.id} done", done_at(job))
        timeline.report(figures)

        assert not [w for w in env.operator_writes(stopped, "deployments", f"{name}-worker")
                    if w.at < back], "the replicas were kept through the outage"
        assert all(d.at < stopped or d.at > back for d in env.decisions(name))
        reasons = [e["reason"] for e in env.cluster.items("events", env.namespace)
                   if e["involvedObject"].get("name") == name]
        assert "RedisUnreachable" in reasons and "RedisReachable" in reasons, reasons
        assert len(jobs) == 6 and all(str(j.status) == "done" for j in jobs)
        figures.append("Redis stopped 6 s: replicas kept at 3, RedisReachable False then "
                          "True, 6 of 6 jobs done")


def test_worker_killed_with_a_lease_is_requeued_and_the_reaper_cronjob_runs(
        autoscaled: Autoscaled, figures: list[str]) -> None:
    env, name = autoscaled, REAPED
    (pod,) = env.wait_ready_pods(name, 1)
    timeline = Timeline("a worker SIGKILLed holding a lease (visibility timeout 5 s)")
    enqueued = timeline.mark("enqueued a job of 3 s")
    (job_id,) = env.enqueue_sleeps(name, [3])
    env.wait_jobs(name, [job_id], "processing", timeout_s=30)
    env.kubelet.kill(env.namespace, pod, signal.SIGKILL)
    timeline.mark(f"pod {pod}: its worker process SIGKILLed")
    (job,) = env.wait_jobs(name, [job_id], timeout_s=60)

    reaper_jobs = _reaper_jobs_done(env, name)
    for event in env.pod_events(name, "started", since=enqueued):
        timeline.mark(f"pod {event.pod} process started again ({event.detail})", event.at)
    for step in events(job):
        if step.event != "enqueued":
            timeline.mark(f"job {step.event} (attempt {step.attempt})", step.at_ms / 1000)
    for reaper_job, reaper_pod, output in reaper_jobs:
        timeline.mark(f"reaper Job {reaper_job['metadata']['name']} Complete; its pod "
                      f"{reaper_pod['metadata']['name']} {reaper_pod['status']['phase']}: "
                      f"{output}", _finished(reaper_job))
    timeline.report(figures)

    assert job.attempt == 2, "the lost run counts"
    assert [e.event for e in events(job, "claimed", "lease_expired", "acked")] == [
        "claimed", "lease_expired", "claimed", "acked"], job.history
    claims = events(job, "claimed")
    assert claims[0].worker != claims[1].worker, "run again by the restarted process"
    (restarted,) = [p for p in env.pods(name) if p["metadata"]["name"] == pod]
    assert restarted["status"]["containerStatuses"][0]["restartCount"] == 1
    requeued_by_cronjob = sum(output.get("requeued", 0) for _, _, output in reaper_jobs)
    figures.append(f"worker SIGKILLed with a lease: requeued by "
                      f"{'the reaper CronJob' if requeued_by_cronjob else 'a worker reaper'}, "
                      f"done on attempt 2; {len(reaper_jobs)} reaper Job(s) of the real "
                      f"cronjob controller Succeeded")


def _reaper_jobs_done(env: Autoscaled, name: str) -> list[tuple[dict[str, Any], dict[str, Any],
                                                                 dict[str, Any]]]:
    """The reaper CronJob's Jobs (at least one), each Complete, with its Succeeded pod and the
    JSON line ``antre reaper --once`` printed. A Job may also hold failed pods that its
    backoffLimit retried (a run at the minute the module's Redis was stopped by another
    scenario): each failed with one clear line, no traceback."""
    def complete() -> list[dict[str, Any]] | None:
        jobs = [j for j in env.cluster.items("jobs", env.namespace, f"antre.dev/jobqueue={name}")
                if any(c["type"] == "Complete" and c["status"] == "True"
                       for c in (j.get("status") or {}).get("conditions") or [])]
        return jobs or None

    # The cronjob controller starts one at each minute boundary.
    found = wait_until(complete, timeout_s=75, interval_s=1, message="a reaper Job Complete")
    assert isinstance(found, list)
    done = []
    for job in found:
        assert job["metadata"]["ownerReferences"][0]["kind"] == "CronJob"
        pods = env.cluster.items("pods", env.namespace,
                                 f"batch.kubernetes.io/job-name={job['metadata']['name']}")
        for pod in pods:
            lines = env.kubelet.log(env.namespace, pod["metadata"]["name"]).splitlines()
            if pod["status"]["phase"] == "Failed":
                assert lines and lines[-1].startswith("antre reaper: "), lines
                assert not any(line.startswith("Traceback") for line in lines), lines
                continue
            assert pod["status"]["phase"] == "Succeeded", pod["status"]
            output = json.loads(next(line for line in lines if line.startswith('{"queue"')))
            assert output["queue"] == name
            done.append((job, pod, output))
    assert done, "a Complete Job has its Succeeded pod"
    return done


def _finished(job: dict[str, Any]) -> float:
    """When the Job completed (its status has whole seconds)."""
    stamp = job["status"]["completionTime"]
    return float(calendar.timegm(time.strptime(stamp, "%Y-%m-%dT%H:%M:%SZ")))
