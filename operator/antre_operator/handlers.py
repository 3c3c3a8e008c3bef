"""The kopf handlers: thin wiring of watch events to the per-JobQueue reconcile loops.

* one daemon per JobQueue runs ``reconciling.Reconciler.step()`` every polling interval;
* JobQueue events wake that loop early when the spec changed (not on our own status writes);
* child events (Deployments, CronJobs, Services labelled as ours) refresh the shared cache and
  wake the owner's loop when a child was deleted or its spec edited by someone else; their
  watches carry a server-side label selector, so the cluster's other objects never reach us,
  and of the labelled ones only children of JobQueues served here are kept (anyone may label);
* startup configures kopf and opens the API client and the metrics endpoint; cleanup closes them.

Importing this module registers the handlers in kopf's default registry (``__main__`` does it).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from typing import Any

import kopf
import kubernetes

from antre_operator import kube, reconciling, rendering, settings

logger = logging.getLogger(__name__)

JOBQUEUES = (settings.GROUP, settings.VERSION, settings.PLURAL)
OURS = {settings.LABEL_MANAGED_BY: settings.MANAGED_BY}
OURS_SELECTOR = ",".join(f"{key}={value}" for key, value in OURS.items())
#: Objects per page of kopf's initial lists (see configure_kopf).
LIST_CHUNK_SIZE = 10
#: How long kopf's worker of an object outlives its last event (see configure_kopf).
WORKER_IDLE_S = 0.1
CHILD_RESOURCES = {
    "Deployment": ("apps", "v1", "deployments"),
    "CronJob": ("batch", "v1", "cronjobs"),
    "Service": ("", "v1", "services"),
}


def _state(memo: Any) -> reconciling.OperatorState:
    state = memo["state"]
    assert isinstance(state, reconciling.OperatorState), "__main__ puts the state in kopf's memo"
    return state


def configure_kopf(kopf_settings: kopf.OperatorSettings, ours: settings.OperatorSettings) -> None:
    """The kopf settings this operator relies on (see docs/operator.md)."""
    # Our own finalizer and annotations, never status.kopf: the CRD schema is structural and
    # would prune unknown status fields.
    kopf_settings.persistence.finalizer = settings.FINALIZER
    kopf_settings.persistence.progress_storage = kopf.AnnotationsProgressStorage(prefix="antre.dev")
    kopf_settings.persistence.diffbase_storage = kopf.AnnotationsDiffBaseStorage(
        prefix="antre.dev", key="last-handled-configuration")
    # Events: ours are posted explicitly on transitions; kopf posts its own handler failures.
    kopf_settings.posting.enabled = True
    kopf_settings.posting.level = logging.WARNING
    # A watch that goes silent (a dead TCP connection) is re-established within these bounds.
    kopf_settings.watching.server_timeout = ours.watch_server_timeout_s
    kopf_settings.watching.client_timeout = ours.watch_client_timeout_s
    kopf_settings.watching.connect_timeout = 30
    # Children are listed and watched with a server-side label selector: without it the API
    # server streams every Deployment, CronJob and Service of the cluster to kopf, which keeps
    # and filters them in this process (CPU and memory in proportion to other people's objects;
    # bench/operator_scale.py). A child whose label is edited away leaves the watch as DELETED,
    # which wakes its JobQueue's loop to put the label back.
    for resource in CHILD_RESOURCES.values():
        kopf_settings.watching.label_selectors[resource] = OURS_SELECTOR
    # The initial lists (at every start) in pages. Anyone who may create a Deployment may label
    # one as ours, up to the API server's ~1.5 MiB an object: one answer holding them all is in
    # memory about three times over while it is read and decoded (60 such objects of 1 MiB took
    # the operator to 316 MiB at start; in pages of 10, 167 MiB). Pages cost a request each.
    kopf_settings.watching.chunk_size = LIST_CHUNK_SIZE
    # kopf's worker of each object keeps the object's last event while it waits for the next
    # one, for queueing.idle_timeout (5 s by default). A start lists every labelled object
    # within that time, so they were all in memory at once, pages or not: 120 of 1 MiB took a
    # restart to 228 MiB, 140 with this. A worker that exits sooner is made again at the
    # object's next event, a task and a queue.
    kopf_settings.queueing.idle_timeout = WORKER_IDLE_S
    kopf_settings.networking.request_timeout = 60
    kopf_settings.networking.connect_timeout = 10
    # Peering (with --peering): a replica that stops renewing its keep-alive for this long is
    # considered gone, and the next one by priority takes over.
    kopf_settings.peering.lifetime = 60


# kopf's own login through the ``kubernetes`` package, as ``kube.py`` loads its credentials:
# the in-cluster service account, else the kubeconfig.
kopf.on.login()(kopf.login_via_client)


@kopf.on.startup()
async def start(settings: kopf.OperatorSettings, memo: Any, **_: Any) -> None:
    state = _state(memo)
    configure_kopf(settings, state.settings)
    try:
        state.kube = kube.KubeClient(timeout_s=state.settings.api_request_timeout_s)
    except kubernetes.config.ConfigException as exc:
        raise kopf.PermanentError(f"no Kubernetes credentials: {exc}") from None
    if state.settings.metrics_port:
        await state.metrics.serve(state.settings.metrics_port)
    policy = state.settings.policy
    if policy.operator_namespace is None:
        logger.warning("POD_NAMESPACE is not set: JobQueues in the operator's own namespace "
                       "are served like any other (the chart sets it)")
    logger.info("JobQueue policy: %s", policy)


@kopf.on.cleanup()
async def stop(memo: Any, **_: Any) -> None:
    state = _state(memo)
    if state.kube is not None:
        await state.kube.close()
    await state.metrics.stop()


@kopf.daemon(*JOBQUEUES, cancellation_timeout=10.0)
async def serve_jobqueue(body: kopf.Body, namespace: str | None, name: str, memo: Any,
                         **_: Any) -> None:
    """The reconcile loop of one JobQueue; kopf starts it on create/resume, cancels on delete."""
    assert namespace is not None, "JobQueues are namespaced"
    state = _state(memo)
    reconciler = reconciling.Reconciler(state, namespace=namespace, name=name)
    wakeup = state.wakeup(namespace, name)
    wakeup.clear()  # set by the creation event itself; the first step comes right away anyway
    try:
        while True:
            try:
                interval = await reconciler.step(body)
            except Exception:  # one bad step must neither kill the loop nor touch other queues
                logger.exception("%s/%s: reconcile failed", namespace, name)
                state.metrics.errors.labels(namespace, name, "Unexpected").inc()
                interval = 10.0
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(wakeup.wait(), timeout=interval)
            wakeup.clear()
    finally:
        await reconciler.close()
        state.forget(namespace, name)


@kopf.on.event(*JOBQUEUES)
async def jobqueue_changed(event: kopf.RawEvent, body: kopf.Body, namespace: str | None,
                           name: str, memo: Any, **_: Any) -> None:
    """Wake the loop when the spec changed; our own status writes change nothing here."""
    if namespace is not None and event.get("type") in ("ADDED", "MODIFIED", None):
        state = _state(memo)
        if state.spec_changed(namespace, name, body.get("spec")):
            state.wakeup(namespace, name).set()


def _child_changed(kind: str, event: kopf.RawEvent, body: kopf.Body, memo: Any) -> None:
    state = _state(memo)
    meta = body.get("metadata") or {}
    key: reconciling.ChildKey = (kind, meta.get("namespace", ""), meta.get("name", ""))
    if not state.keeps_child(key):
        # No JobQueue here will ask for it: keep nothing, neither the object (anyone who may
        # create a Deployment may label one as ours, as large as the API server takes) nor a
        # "known to be absent" marker once deleted.
        state.drop_child(key)
        return
    deleted = event.get("type") == "DELETED"
    if deleted:
        # The version the object left our watch at: a child whose label was edited away
        # stays (its DELETED event carries its last view with our label, at the new version).
        state.remember_child(key, None, gone_at=reconciling.resource_version_number(body))
    else:
        state.remember_child(key, body)
    applied = state.applied.get(key)
    owner = rendering.jobqueue_of_child(kind, key[2])
    if applied is None or owner is None:
        return
    if deleted or applied.edited_by_hand(body):
        state.wakeup(key[1], owner).set()


# Handlers are async: they touch asyncio.Events, which are not thread-safe (kopf runs sync ones
# in a thread pool).
@kopf.on.event(*CHILD_RESOURCES["Deployment"], labels=OURS)
async def deployment_changed(event: kopf.RawEvent, body: kopf.Body, memo: Any,
                             **_: Any) -> None:
    _child_changed("Deployment", event, body, memo)


@kopf.on.event(*CHILD_RESOURCES["CronJob"], labels=OURS)
async def cronjob_changed(event: kopf.RawEvent, body: kopf.Body, memo: Any,
                          **_: Any) -> None:
    _child_changed("CronJob", event, body, memo)


@kopf.on.event(*CHILD_RESOURCES["Service"], labels=OURS)
async def service_changed(event: kopf.RawEvent, body: kopf.Body, memo: Any,
                          **_: Any) -> None:
    _child_changed("Service", event, body, memo)
