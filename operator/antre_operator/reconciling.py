"""One JobQueue's reconcile loop: read -> decide -> apply, one ``step()`` per polling interval.

``handlers.py`` runs a :class:`Reconciler` per JobQueue inside a kopf daemon and wakes it early
when the spec changes or a child is edited or deleted. Each step:

1. parses the spec (``spec.py``); a bad spec gives a condition and an Event, nothing else;
2. reads the queue's depth in ONE Redis round trip (``backlog.py``), with the URL from the spec
   or its Secret (``secret_reading.py``);
3. decides the worker replicas (``scaling.py``: spec.replicas when autoscaling is off, the
   current replicas on a Redis error);
4. before lowering replicas, marks idle pods cheapest to delete (pod-deletion-cost);
5. applies the children (``rendering.py`` + ``kube.py``, server-side apply), skipping a child
   when neither what the operator applies nor the child (its status aside) changed since its
   last apply;
6. patches the status only when it changed (``status.py``).

So a JobQueue whose numbers do not move causes no Kubernetes writes. Errors of one JobQueue stay
in its own status and Events; other JobQueues have their own loops.
"""

from __future__ import annotations

import asyncio
import dataclasses
import datetime
import json
import logging
import time
from collections.abc import Mapping
from typing import Any, Final

import kopf

from antre_operator import (
    backlog,
    kube,
    metrics,
    policy,
    rendering,
    scaling,
    secret_reading,
    settings,
    spec,
    status,
)

logger = logging.getLogger(__name__)

ChildKey = tuple[str, str, str]
"""(kind, namespace, name) of a child object."""

_MISSING: Final[Any] = object()
#: Problems with the Redis URL of a Secret for which no child is created or changed.
URL_REFUSED: Final = frozenset({"InvalidRedisUrl", policy.NotAllowed.reason})
#: Next step after a spec the operator cannot use: a fix of the spec wakes the loop anyway.
INVALID_SPEC_RETRY_S: Final = 60.0
#: Next step while the JobQueue is being deleted: kopf stops the loop before it comes.
BEING_DELETED_RETRY_S: Final = 60.0
#: API server answers that refuse a manifest itself (invalid, bad request, denied at admission):
#: the same manifest is refused again, so it is sent again only after a pause that doubles.
REFUSING_STATUSES: Final = frozenset({400, 403, 422})
REFUSED_RETRY_MIN_S: Final = 10.0
REFUSED_RETRY_MAX_S: Final = 600.0


def refused_retry_after_s(previous_s: float | None) -> float:
    """The pause before a refused manifest is sent again: 10 s, doubling up to 10 min (a
    changed admission policy or quota may accept it later; a changed spec is sent at once)."""
    if previous_s is None:
        return REFUSED_RETRY_MIN_S
    return min(previous_s * 2, REFUSED_RETRY_MAX_S)


def resource_version_number(body: Mapping[str, Any] | None) -> int | None:
    """A resourceVersion as a number, to order two views of one object (None: none given)."""
    try:
        return int((body or {}).get("metadata", {}).get("resourceVersion"))
    except (TypeError, ValueError):
        return None


def _generation(body: Mapping[str, Any] | None) -> int | None:
    value = ((body or {}).get("metadata") or {}).get("generation")
    return value if isinstance(value, int) else None


@dataclasses.dataclass(frozen=True)
class Applied:
    """What the operator last applied to one child, and the child as that apply left it."""

    manifest: dict[str, Any]
    written: str | None
    """The child as the apply left it (the digest ``kube.written_state``); None while the apply
    is in flight: its own watch event must not pass for a hand edit."""
    generation: int | None
    """metadata.generation after the apply: the API server raises it on every change of the
    spec (a hand edit of replicas, image, env), never for status or metadata."""
    resource_version: str | None = None
    """The newest resourceVersion seen with ``written`` unchanged: the same version is the same
    object, so the comparison of its written state is skipped (most polls at rest)."""

    def unchanged(self, manifest: Mapping[str, Any], live: Mapping[str, Any] | None) -> bool:
        """Nothing to apply: the same manifest, and the child as this apply left it (its status
        aside)."""
        if self.written is None or not (manifest is self.manifest or manifest == self.manifest):
            return False
        seen = kube.resource_version(live)
        return (seen is not None and seen == self.resource_version) \
            or kube.written_state(live) == self.written

    def seen(self, live: Mapping[str, Any] | None) -> Applied:
        """This apply, remembering ``live``'s version as one where it is still unchanged."""
        version = kube.resource_version(live)
        return self if version == self.resource_version else dataclasses.replace(
            self, resource_version=version)

    def edited_by_hand(self, live: Mapping[str, Any]) -> bool:
        """A watch event of a spec change the operator did not make: worth a step at once.
        Other changes (labels, annotations) wait for the next poll."""
        return self.written is not None and _generation(live) != self.generation


@dataclasses.dataclass(frozen=True)
class Refusal:
    """A manifest the API server refused, and when it may be sent again."""

    manifest: dict[str, Any]
    error: kube.KubeError
    retry_at: float
    pause_s: float

    def of(self, manifest: Mapping[str, Any]) -> bool:
        """Whether this refusal answered that same manifest."""
        return manifest is self.manifest or manifest == self.manifest

    def holds(self, manifest: Mapping[str, Any], now: float) -> bool:
        """The same manifest, before its retry time: answer with the refusal, send nothing."""
        return now < self.retry_at and self.of(manifest)


@dataclasses.dataclass
class OperatorState:
    """Shared by every handler of one operator process (through kopf's memo)."""

    settings: settings.OperatorSettings
    metrics: metrics.Metrics = dataclasses.field(default_factory=metrics.Metrics)
    kube: kube.KubeClient | None = None
    children: dict[ChildKey, dict[str, Any] | None] = dataclasses.field(default_factory=dict)
    """Last seen view of each child of a JobQueue served here (``kube.child_view``; None: known
    to be absent), from watches, reads and our writes."""
    applied: dict[ChildKey, Applied] = dataclasses.field(default_factory=dict)
    """The operator's last apply per child: to skip it at rest and to tell hand edits."""
    spec_fingerprints: dict[tuple[str, str], str] = dataclasses.field(default_factory=dict)
    wakeups: dict[tuple[str, str], asyncio.Event] = dataclasses.field(default_factory=dict)
    gone_at: dict[ChildKey, int] = dataclasses.field(default_factory=dict)
    """The resourceVersion at which a child left our watch (its DELETED event), while it is
    known to be absent: an older view (the answer of an apply sent before a hand edit removed
    our label) must not bring it back, or the view would show our label for good, and no event
    of an object outside the watch would ever correct it."""

    def wakeup(self, namespace: str, name: str) -> asyncio.Event:
        return self.wakeups.setdefault((namespace, name), asyncio.Event())

    def remember_child(self, key: ChildKey, body: Mapping[str, Any] | None, *,
                       gone_at: int | None = None) -> None:
        """Keep the newest view: a late watch event or API answer must not overwrite a fresher
        one. ``body`` None: the child is absent, since ``gone_at`` (a DELETED event's
        resourceVersion) when known."""
        old = self.children.get(key)
        new_rv = resource_version_number(body)
        old_rv = resource_version_number(old) if old is not None else self.gone_at.get(key)
        if body is not None and new_rv is not None and old_rv is not None and new_rv < old_rv:
            return
        if body is None and gone_at is not None:
            self.gone_at[key] = gone_at
        else:
            self.gone_at.pop(key, None)
        self.children[key] = None if body is None else kube.child_view(body)

    def drop_child(self, key: ChildKey) -> None:
        """No view of the child at all: the next step reads it from the API server."""
        self.children.pop(key, None)
        self.gone_at.pop(key, None)

    def serves(self, namespace: str, name: str) -> bool:
        """Whether the JobQueue is one this process has seen and not forgotten."""
        return (namespace, name) in self.spec_fingerprints

    def keeps_child(self, key: ChildKey) -> bool:
        """Whether a watch event of ``key`` is worth keeping: a child the operator applied, or
        an object under a child's name of a JobQueue served here (its own, or a stranger's in
        the way). The watches bring every object labelled as ours, and anyone who may create a
        Deployment anywhere may label one so: those of no JobQueue here cost nothing. A child
        whose event came before its JobQueue's is read by the JobQueue's first step."""
        if key in self.applied:
            return True
        owner = rendering.jobqueue_of_child(key[0], key[2])
        return owner is not None and self.serves(key[1], owner)

    def spec_changed(self, namespace: str, name: str, spec_body: Any) -> bool:
        fingerprint = json.dumps(spec_body, sort_keys=True, default=str)
        changed = self.spec_fingerprints.get((namespace, name)) != fingerprint
        self.spec_fingerprints[(namespace, name)] = fingerprint
        return changed

    def forget(self, namespace: str, name: str) -> None:
        self.metrics.forget(namespace, name)
        self.wakeups.pop((namespace, name), None)
        self.spec_fingerprints.pop((namespace, name), None)
        for key in [k for k, v in self.applied.items()
                    if k[1] == namespace
                    and v.manifest["metadata"]["labels"].get(settings.LABEL_JOBQUEUE) == name]:
            del self.applied[key]
        for kind, child in rendering.child_names(name):
            self.drop_child((kind, namespace, child))


def _now_iso() -> str:
    return datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


class Reconciler:
    """The state one JobQueue's loop keeps between steps (all of it rebuildable on restart)."""

    def __init__(self, state: OperatorState, *, namespace: str, name: str) -> None:
        self.state = state
        self.namespace = namespace
        self.name = name
        self.memory = scaling.ScalerMemory()
        self.reader: backlog.QueueReader | None = None
        self.last_status: dict[str, Any] | None = None
        self.numbers: status.QueueNumbers | None = None
        self.last_scale_time: str | None = None
        self.eviction_warning: str | None = None
        self.eviction_unreadable: str | None = None
        self.eviction_checked_at: float | None = None
        self.secrets = secret_reading.SecretReader(namespace=namespace,
                                                   policy=state.settings.policy)
        self._reported: dict[str, str] = {}
        self._parsed: tuple[tuple[str, int], spec.JobQueueSpec] | None = None
        self._rendered: tuple[spec.JobQueueSpec, tuple[str, int, bool], rendering.Children] | None = None
        self._refusals: dict[ChildKey, Refusal] = {}
        self._status_refusal: Refusal | None = None
        """The last status patch the API server refused (its content without timestamps)."""

    @property
    def kube(self) -> kube.KubeClient:
        assert self.state.kube is not None, "the startup handler creates the client"
        return self.state.kube

    # -- events, only on transitions -------------------------------------------------------------

    def _report(self, body: Any, topic: str, *, reason: str, message: str) -> None:
        """A Warning Event when a problem shows up or changes its reason (not per poll: the
        message of one outage may vary, e.g. "connection refused" after "connection reset")."""
        if self._reported.get(topic) != reason:
            self._reported[topic] = reason
            logger.warning("%s/%s: %s: %s", self.namespace, self.name, reason, message)
            kopf.event(body, type="Warning", reason=reason, message=message)

    def _resolve(self, body: Any, topic: str, *, reason: str, message: str) -> None:
        """A Normal Event when a reported problem is gone."""
        if self._reported.pop(topic, None) is not None:
            kopf.event(body, type="Normal", reason=reason, message=message)

    # -- the step ----------------------------------------------------------------------------------

    async def step(self, body: Any) -> float:
        """One reconcile; returns the seconds until the next one."""
        meta = body.get("metadata") or {}
        if meta.get("deletionTimestamp"):
            # Being deleted (with --cascade=foreground the garbage collector is removing the
            # children right now): recreate nothing, write nothing.
            return BEING_DELETED_RETRY_S
        generation = meta.get("generation")
        uid = str(meta.get("uid", ""))
        try:
            jq = self._valid_spec(body, uid, generation)
        except spec.InvalidSpec as exc:
            self.state.metrics.errors.labels(self.namespace, self.name, exc.reason).inc()
            self._report(body, "spec", reason=exc.reason, message=str(exc))
            invalid = status.Problem(exc.reason, str(exc))
            await self._write_status(body, status.Observation(generation=generation,
                                                              problem=invalid))
            return INVALID_SPEC_RETRY_S
        self._resolve(body, "spec", reason="SpecValid", message="the spec is valid again")
        interval = float(self.state.settings.polling_interval_override_s
                         or jq.autoscaling.polling_interval_s)
        try:
            # Right after a restart the watch may not have delivered the worker Deployment yet:
            # read it, or "nothing cached" would pass for "nothing runs" and scale down at once.
            await self._observed(self._worker_key(jq))
        except kube.KubeError as exc:
            # The current replicas are unknown: decide nothing and write nothing this poll.
            self.state.metrics.errors.labels(self.namespace, self.name, "WorkerUnreadable").inc()
            self._report(body, "worker", reason="WorkerUnreadable",
                         message=f"the worker Deployment cannot be read: {exc}; "
                                 f"not changing anything")
            return interval
        self._resolve(body, "worker", reason="WorkerReadable",
                      message="the worker Deployment is readable again")
        # Before applying: an apply refused for a stranger's object under a child's name drops
        # its view, which the next step reads again, not this one.
        await self._observe_status_children(jq)

        problem: status.Problem | None
        url, problem = await self.secrets.redis_url(self.kube, jq.redis)
        if problem is not None:
            self.state.metrics.errors.labels(self.namespace, self.name, problem.reason).inc()
            self._report(body, "config", reason=problem.reason, message=problem.message)
        else:
            self._resolve(body, "config", reason="ConfigResolved",
                          message="the Redis URL is readable again")
        reading, redis_error = await self._read(body, jq, url)

        current = self._current_replicas(jq, uid)
        # No reading when the URL is unknown or Redis failed: the decision then keeps what runs.
        decision = scaling.decide_workers(
            jq, backlog=None if reading is None else reading.numbers.backlog,
            in_flight=0 if reading is None else reading.in_flight, current=current,
            memory=self.memory, now_s=time.monotonic())
        self.memory = decision.memory
        if current is not None and decision.replicas < current:
            marked = await self._prefer_idle_pods(jq)
            if not marked and jq.autoscaling.enabled:
                decision = scaling.hold_scale_down(decision, current)

        applied: int | None = decision.replicas
        try:
            if problem is not None and problem.reason in URL_REFUSED:
                # Pods started now would use a URL the operator refused (a plain-text one while
                # spec.redis.tls is true would send the password in clear): touch nothing.
                applied = None
            else:
                at_rest = scaling.reaper_at_rest(
                    replicas=decision.replicas, numbers=None if reading is None else reading.numbers)
                await self._apply_children(body, jq, uid, decision.replicas, at_rest)
        except kube.NamespaceTerminating:
            # `kubectl delete namespace` with the JobQueue in it: the namespace controller
            # deletes the children first; recreating them is refused, and so would be an Event.
            logger.info("%s/%s: the namespace is being deleted; recreating nothing",
                        self.namespace, self.name)
            return interval
        except kube.KubeError as exc:
            applied = None
            named = rendering.spec_fields_named(
                str(exc), worker_env_start=rendering.worker_env_start(jq))
            behind = f" (from {', '.join(named)})" if named else ""
            problem = problem or status.Problem("ApplyFailed",
                                                f"applying the children{behind}: {exc}")
            self.state.metrics.errors.labels(self.namespace, self.name, "ApplyFailed").inc()
            self._report(body, "apply", reason="ApplyFailed", message=f"{exc}{behind}")
        else:
            if applied is not None:
                self._resolve(body, "apply", reason="Applied", message="the children are applied")
                if current is not None and decision.replicas != current:
                    self._scaled(body, current, decision)

        self._export(jq, reading, current, decision.replicas)
        workers = None if applied is None else await self._workers(body, jq, uid, applied)
        observation = status.Observation(
            generation=generation, problem=problem, redis_error=redis_error,
            eviction_warning=self.eviction_warning,
            eviction_checked=self.eviction_checked_at is not None,
            eviction_unreadable=self.eviction_unreadable, numbers=self.numbers,
            autoscaling=jq.autoscaling.enabled, replicas=applied,
            ready_replicas=self._ready_replicas(jq, uid), desired_replicas=decision.replicas,
            scaling_note=decision.note, selector=rendering.worker_selector(jq.name),
            last_scale_time=self.last_scale_time, workers=workers, api=self._api(jq, uid),
            reaper=self._reaper(jq, uid))
        await self._write_status(body, observation)
        return interval

    def _valid_spec(self, body: Any, uid: str, generation: Any) -> spec.JobQueueSpec:
        """The spec parsed and allowed; parsed once per generation (the API server raises it
        on every change of a custom resource's spec), since a poll at rest changes nothing."""
        version = (uid, generation) if isinstance(generation, int) else None
        if version is not None and self._parsed is not None and self._parsed[0] == version:
            return self._parsed[1]
        jq = spec.parse_jobqueue(name=self.name, namespace=self.namespace,
                                 spec=body.get("spec") or {})
        rendering.check_name(jq)
        policy.check_jobqueue(jq, self.state.settings.policy)
        self._parsed = None if version is None else (version, jq)
        return jq

    def _children(self, jq: spec.JobQueueSpec, uid: str, replicas: int,
                  reaper_at_rest: bool) -> rendering.Children:
        """The rendered children, again only when the spec, the replicas or the reaper's rest
        changed: the same manifest objects then let :meth:`Applied.unchanged` skip comparing
        them."""
        inputs = (uid, replicas, reaper_at_rest)
        if self._rendered is not None and self._rendered[0] is jq and self._rendered[1] == inputs:
            return self._rendered[2]
        children = rendering.render_children(jq, uid, replicas=replicas,
                                             reaper_at_rest=reaper_at_rest)
        self._rendered = (jq, inputs, children)
        return children

    async def close(self) -> None:
        if self.reader is not None:
            await self.reader.close()
            self.reader = None

    # -- reading -----------------------------------------------------------------------------------

    async def _read(self, body: Any, jq: spec.JobQueueSpec,
                    url: str | None) -> tuple[backlog.Reading | None, str | None]:
        if url is None:
            return None, None
        if self.reader is None or not self.reader.matches(url, jq.redis.queue, jq.redis.prefix):
            await self.close()
            self.reader = backlog.QueueReader(url, queue=jq.redis.queue, prefix=jq.redis.prefix,
                                              timeout_s=self.state.settings.redis_timeout_s,
                                              jobqueue=(self.namespace, self.name))
            self.eviction_checked_at = None
        try:
            reading = await self.reader.read()
            await self._check_eviction(body)
        except backlog.RedisReadError as exc:
            self.secrets.forget()  # the Secret may have been rotated: read it again next time
            self.state.metrics.errors.labels(self.namespace, self.name, "RedisUnreachable").inc()
            if self._reported.get("redis") != "RedisUnreachable":
                logger.warning("%s/%s: Redis cannot be read: %s", self.namespace, self.name,
                               exc.detail)
            self._report(body, "redis", reason="RedisUnreachable",
                         message=f"{exc}; keeping the current replicas")
            return None, str(exc)
        self._resolve(body, "redis", reason="RedisReachable", message="Redis answers again")
        self.numbers = reading.numbers
        return reading, None

    async def _check_eviction(self, body: Any) -> None:
        """maxmemory-policy, at connect and then every eviction_check_interval_s (not per poll)."""
        now = time.monotonic()
        if (self.eviction_checked_at is not None
                and now - self.eviction_checked_at < self.state.settings.eviction_check_interval_s):
            return
        assert self.reader is not None
        try:
            self.eviction_warning = await self.reader.eviction_warning()
        except backlog.RedisRefused as exc:
            # INFO renamed or disabled (managed Redis), denied by an ACL (@dangerous) or silent
            # about the policy (a proxy): the depth read succeeded, so the queue is served and
            # scaled; only this check is not.
            self.eviction_checked_at = now
            self.eviction_warning = None
            self.eviction_unreadable = (
                "maxmemory-policy cannot be read: INFO was refused (renamed, disabled or denied "
                "by an ACL) or did not report it; make sure it is noeviction, or Redis may evict "
                "jobs")
            logger.info("%s/%s: %s", self.namespace, self.name, exc.detail)
            return
        self.eviction_unreadable = None
        self.eviction_checked_at = now
        if self.eviction_warning is not None:
            self._report(body, "eviction", reason="RedisEvictionPolicy",
                         message=self.eviction_warning)
        else:
            self._resolve(body, "eviction", reason="RedisNoEviction",
                          message="maxmemory-policy is noeviction")

    # -- deciding ----------------------------------------------------------------------------------

    def _worker_key(self, jq: spec.JobQueueSpec) -> ChildKey:
        return ("Deployment", self.namespace, rendering.worker_name(jq.name))

    def _own_child(self, key: ChildKey, uid: str) -> dict[str, Any] | None:
        """The cached child if it is ours: a stranger's replicas or status are not ours."""
        live = self.state.children.get(key)
        if not live or not kube.ours(live, jobqueue=self.name, uid=uid):
            return None
        return live

    def _own_worker(self, jq: spec.JobQueueSpec, uid: str) -> dict[str, Any] | None:
        return self._own_child(self._worker_key(jq), uid)

    def _current_replicas(self, jq: spec.JobQueueSpec, uid: str) -> int | None:
        live = self._own_worker(jq, uid)
        if live is None:
            return None
        replicas = (live.get("spec") or {}).get("replicas")
        return replicas if isinstance(replicas, int) else 1

    def _api(self, jq: spec.JobQueueSpec, uid: str) -> status.Api | None:
        """The API Deployment's availability, from the watch's cache (no request)."""
        if not jq.api.enabled:
            return None
        name = rendering.api_name(jq.name)
        live = self._own_child(("Deployment", self.namespace, name), uid)
        return status.Api(name=name, wanted=jq.api.replicas,
                          available=None if live is None else status.available_replicas(live))

    def _reaper(self, jq: spec.JobQueueSpec, uid: str) -> status.Reaper:
        """The reaper CronJob's last runs, from the watch's cache (no request)."""
        name = rendering.reaper_name(jq.name)
        return status.observed_reaper(self._own_child(("CronJob", self.namespace, name), uid),
                                      name=name,
                                      selector=rendering.pod_selector(jq.name, "reaper"))

    def _ready_replicas(self, jq: spec.JobQueueSpec, uid: str) -> int:
        live = self._own_worker(jq, uid) or {}
        ready = (live.get("status") or {}).get("readyReplicas")
        return ready if isinstance(ready, int) else 0

    async def _workers(self, body: Any, jq: spec.JobQueueSpec, uid: str,
                       replicas: int) -> status.Workers:
        """How many workers are available and, while some are not, why (from their pods: a
        read only then, so a JobQueue at rest costs nothing here)."""
        live = self._own_worker(jq, uid)
        workers = status.Workers(available=status.available_replicas(live))
        if status.pods_worth_reading(live, replicas=replicas):
            try:
                pods = await self.kube.list("Pod", self.namespace,
                                            labels=rendering.selector_labels(jq.name, "worker"))
            except kube.KubeError as exc:
                logger.warning("%s/%s: cannot read the worker pods: %s", self.namespace,
                               self.name, exc)
            else:
                workers = dataclasses.replace(workers, trouble=status.pod_trouble(pods))
        if workers.trouble is not None:
            self._report(body, "workers", reason=workers.trouble.reason,
                         message=workers.trouble.message)
        else:
            self._resolve(body, "workers", reason="WorkersRecovered",
                          message="no worker pod is failing any more")
        return workers

    # -- applying ----------------------------------------------------------------------------------

    async def _prefer_idle_pods(self, jq: spec.JobQueueSpec) -> bool:
        """Set pod-deletion-cost = jobs in flight on every worker pod, so idle pods go first.

        Returns False when the registry could not be read: the caller then holds the scale-down.
        """
        if self.reader is None:
            return False
        try:
            in_flight = await self.reader.jobs_in_flight_by_pod()
        except backlog.RedisReadError as exc:
            logger.warning("%s/%s: worker registry unreadable: %s", self.namespace, self.name, exc)
            return False
        try:
            pods = await self.kube.list("Pod", self.namespace,
                                        labels=rendering.selector_labels(jq.name, "worker"))
            for pod in pods:
                meta = pod.get("metadata") or {}
                if meta.get("deletionTimestamp"):
                    continue
                cost = str(in_flight.get(meta.get("name", ""), 0))
                if (meta.get("annotations") or {}).get(settings.POD_DELETION_COST) != cost:
                    await self.kube.patch("Pod", self.namespace, meta["name"], {
                        "metadata": {"annotations": {settings.POD_DELETION_COST: cost}}})
        except kube.KubeError as exc:
            logger.warning("%s/%s: cannot annotate worker pods: %s", self.namespace, self.name, exc)
            return False
        return True

    async def _observed(self, key: ChildKey) -> dict[str, Any] | None:
        live = self.state.children.get(key, _MISSING)
        if live is _MISSING:
            live = await self.kube.get(*key)
            self.state.remember_child(key, live)
        return live  # type: ignore[no-any-return]

    async def _observe_status_children(self, jq: spec.JobQueueSpec) -> None:
        """The children the status reads beside the worker (the reaper, the API), read if
        nothing is known of them: after a restart their watch events may have come before the
        JobQueue's, and were not kept (``OperatorState.keeps_child``), and a step that applies
        nothing (a refused URL or child) would not read them. Once read, the watch keeps them
        current; a failed read leaves them unobserved this step."""
        keys: list[ChildKey] = [("CronJob", self.namespace, rendering.reaper_name(jq.name))]
        if jq.api.enabled:
            keys.append(("Deployment", self.namespace, rendering.api_name(jq.name)))
        for key in keys:
            try:
                await self._observed(key)
            except kube.KubeError as exc:
                logger.info("%s/%s: %s %s not read: %s", self.namespace, self.name, key[0],
                            key[2], exc)

    async def _apply_children(self, body: Any, jq: spec.JobQueueSpec, uid: str,
                              replicas: int, reaper_at_rest: bool) -> None:
        children = self._children(jq, uid, replicas, reaper_at_rest)
        for manifest in children.present:
            key: ChildKey = (manifest["kind"], self.namespace, manifest["metadata"]["name"])
            live = await self._observed(key)
            before = self.state.applied.get(key)
            if before is not None and before.unchanged(manifest, live):
                self.state.applied[key] = before.seen(live)
                continue  # at rest: no write
            refusal = self._refusals.get(key)
            if refusal is not None and refusal.holds(manifest, time.monotonic()):
                # Not a request per poll for an answer known already (a fresh traceback: one
                # raised again keeps growing its own).
                raise refusal.error.with_traceback(None)
            # Before the write: its own watch event may arrive while we await the answer, and
            # must not pass for a hand edit (that would run the next step at once, so a
            # maxScaleUpStep would be taken twice per poll).
            self.state.applied[key] = Applied(manifest, None, None)
            try:
                action, stored = await self.kube.apply(manifest, live)
            except (kube.NotOwned, kube.Replaced):
                # Our watches filter on our labels and would never refresh this view: forget
                # it, so the next poll reads again (and sees the stranger gone once deleted).
                # Replaced: the view was late, the name holds another object; read it too.
                self.state.drop_child(key)
                self.state.applied.pop(key, None)
                raise
            except kube.KubeError as exc:
                if exc.status in REFUSING_STATUSES:
                    previous_s = (refusal.pause_s if refusal is not None and refusal.of(manifest)
                                  else None)
                    pause_s = refused_retry_after_s(previous_s)
                    self._refusals[key] = Refusal(manifest, exc, time.monotonic() + pause_s,
                                                  pause_s)
                raise
            self._refusals.pop(key, None)
            self.state.applied[key] = Applied(manifest, kube.written_state(stored),
                                              _generation(stored), kube.resource_version(stored))
            self.state.remember_child(key, stored)
            if before is not None and (action == "created" or
                                       (action == "changed" and before.manifest == manifest)):
                # We had applied exactly this before: someone deleted or edited it by hand.
                kopf.event(body, type="Normal", reason="Repaired",
                           message=f"{action} {key[0]} {key[2]} to match the JobQueue")
        for kind, name in children.absent:
            key = (kind, self.namespace, name)
            self.state.applied.pop(key, None)
            live = await self._observed(key)
            topic = f"not-ours:{kind}/{name}"
            if live is not None:
                # Ours, or one this JobQueue would adopt (orphaned by --cascade=orphan, or a
                # predecessor's): the spec no longer wants it, so it goes.
                if not kube.ours(live, jobqueue=self.name, uid=uid):
                    # Once per change, not per poll.
                    self._report(body, topic, reason="NotOurs",
                                 message=f"{kind} {name} is not ours; not deleting it")
                    continue
                try:
                    # The uid seen: a view from a watch can be late, and the name may hold a
                    # stranger's object by now, which only the precondition (a 409) spares.
                    await self.kube.delete(kind, self.namespace, name,
                                           uid=str(live["metadata"]["uid"]))
                except kube.Conflict:
                    self.state.drop_child(key)  # read again at the next step
                    continue
                self.state.remember_child(key, None)
            self._resolve(body, topic, reason="NotOursGone",
                          message=f"{kind} {name} is no longer a stranger's object in the way")

    def _scaled(self, body: Any, current: int, decision: scaling.WorkerDecision) -> None:
        message = f"Scaled workers {current} -> {decision.replicas}: {decision.reason}"
        logger.info("%s/%s: %s", self.namespace, self.name, message)
        kopf.event(body, type="Normal", reason="Scaled", message=message)
        self.last_scale_time = _now_iso()
        direction = "up" if decision.replicas > current else "down"
        self.state.metrics.scales.labels(self.namespace, self.name, direction).inc()

    def _export(self, jq: spec.JobQueueSpec, reading: backlog.Reading | None,
                current: int | None, desired: int) -> None:
        labels = (self.namespace, self.name)
        m = self.state.metrics
        m.desired.labels(*labels).set(desired)
        m.current.labels(*labels).set(current if current is not None else 0)
        m.redis_up.labels(*labels).set(1 if reading is not None else 0)
        if reading is not None:
            n = reading.numbers
            m.backlog.labels(*labels).set(n.backlog)
            m.processing.labels(*labels).set(n.processing)
            m.dead.labels(*labels).set(n.dead)
            m.oldest_age.labels(*labels).set(n.oldest_ready_age_s or 0)

    async def _write_status(self, body: Any, observation: status.Observation) -> None:
        previous = self.last_status
        if previous is None:
            previous = json.loads(json.dumps(dict(body.get("status") or {}), default=str))
        new = status.render_status(observation, previous=previous, now=_now_iso())
        patch = status.status_patch(new, previous)
        if patch is None:
            self.last_status = new
            self._status_refusal = None
            return
        content = status.without_times(new)
        refusal = self._status_refusal
        if refusal is not None and refusal.holds(content, time.monotonic()):
            return  # refused already: not the same request again at every poll
        try:
            await self.kube.patch(settings.KIND, self.namespace, self.name, {"status": patch},
                                  subresource="status")
        except kube.KubeError as exc:
            if exc.status == 404:  # the JobQueue is being deleted
                return
            self.state.metrics.errors.labels(self.namespace, self.name, "StatusFailed").inc()
            previous_s = refusal.pause_s if refusal is not None and refusal.of(content) else None
            pause_s = refused_retry_after_s(previous_s)
            self._status_refusal = Refusal(content, exc, time.monotonic() + pause_s, pause_s)
            logger.warning("%s/%s: status not written (the same status is sent again in %gs "
                           "at the earliest): %s", self.namespace, self.name, pause_s, exc)
            return
        self._status_refusal = None
        self.last_status = new
