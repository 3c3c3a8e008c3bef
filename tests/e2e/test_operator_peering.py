"""Two operator replicas with kopf peering, as the chart runs them with ``operator.replicaCount``
above 1, on a real API server and under the chart's RBAC.

Both processes run with the chart's arguments (``--peering antre``, a random priority each) and a
token of its ServiceAccount; the second is given a priority above any the first may have drawn,
so the first pauses for it. One JobQueue is served while both run; the acting one is then
stopped (SIGTERM, as a rollout or a drained node does) and the standby serves a second JobQueue
(the figure says how soon). Neither process is refused a
request, and the verbs the ServiceAccount sent on the peering object (the audit log) are exactly
the verbs the chart grants on it: a review found ``get`` granted, which kopf's peering never
sends (it lists, watches and patches the object's status).
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from .cluster import Cluster
from .installs import operator_rules
from .samples import jobqueue
from .serving import SETTLE_S, serve

pytestmark = pytest.mark.usefixtures("crds")


def test_two_replicas_with_peering_use_exactly_the_verbs_the_chart_grants(
        cluster: Cluster, tmp_path: Path, figures: list[str]) -> None:
    if cluster.audit is None:
        pytest.skip("needs the API server's audit log; the suite's own control plane has one")
    with serve(cluster, "cluster-wide", tmp_path, operator_values={"replicaCount": 2},
               pods=None) as served:
        assert "--peering=antre" in served.install.operator_args()
        first = served.operator
        # A second replica above any priority the chart's leaves to chance (1 to 1,000,000), so
        # the one acting is known: the first pauses in its favour.
        second = first.replica(tmp_path / "operator-2.log")
        second.argv.append("--priority=1000001")
        second.start()
        try:
            first.wait_for_log("Pausing operations in favour of", timeout_s=SETTLE_S)
            cluster.apply(jobqueue("before"), namespace=served.namespace)
            served.wait_child("deployment", "before-worker")
        finally:
            # The acting replica goes (SIGTERM, as a rollout does); the first takes over, and
            # serve() stops it at the end, once the JobQueues are gone.
            second.stop(timeout_s=15)
        stopped_at = time.monotonic()
        cluster.apply(jobqueue("after"), namespace=served.namespace)
        served.wait_child("deployment", "after-worker")
        figures.append(f"operator replicas with peering: the standby served a new JobQueue "
                       f"{time.monotonic() - stopped_at:.1f} s after the acting one stopped")
        refused = [line for r in (first, second) for line in r.forbidden() + r.errors()]
        assert not refused, "\n".join(refused)

        granted = {verb for rule in operator_rules(cluster, served.install)
                   if "kopf.dev" in rule["apiGroups"] and "clusterkopfpeerings" in rule["resources"]
                   for verb in rule["verbs"]}
        used = {r.verb for r in cluster.audit.requests() if r.user == served.install.user
                and r.resource.startswith("clusterkopfpeerings")}
        assert used == granted == {"list", "watch", "patch"}, (used, granted)

