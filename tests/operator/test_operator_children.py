"""The operator against the emulated API: children appear, are owned, and are repaired.

Aspects: a JobQueue gets its worker Deployment and reaper CronJob (and API Deployment/Service
when enabled), each with an ownerReference to it; a child deleted or edited by hand is restored;
the API children go away when the API is disabled; status and printer-column fields are set.
"""

from __future__ import annotations

from typing import Any

from operator_emulation import condition, create, eventually, jobqueue

NS = "default"


async def test_children_appear_owned(k8s: Any, operator: Any, redis_url: str) -> None:
    await create(k8s, jobqueue("mail", NS, redis_url))
    jq = await eventually(lambda: k8s.live("jobqueues", NS, "mail"), message="the JobQueue")
    worker = await eventually(lambda: k8s.live("deployments", NS, "mail-worker"),
                              message="the worker Deployment")
    reaper = await eventually(lambda: k8s.live("cronjobs", NS, "mail-reaper"),
                              message="the reaper CronJob")
    for child in (worker, reaper):
        [ref] = child["metadata"]["ownerReferences"]
        assert ref["uid"] == jq["metadata"]["uid"] and ref["kind"] == "JobQueue"
    ready = await eventually(
        lambda: (c := condition(k8s.live("jobqueues", NS, "mail"), "Ready")) and
        c["status"] == "True" and c, message="Ready=True")
    assert ready["reason"] == "Reconciled"
