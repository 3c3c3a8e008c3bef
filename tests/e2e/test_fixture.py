"""The fixture's helpers for other suites (autoscaling, security): users, RBAC, the audit log.

Aspects: a kubeconfig for a user in some groups authenticates as that user (a client certificate
on the built control plane, impersonation on a cluster of your own) and has exactly the rights
RBAC grants: a Role in one namespace lets it list pods there and nowhere else; the audit log
attributes those requests, refusals included, to the user, counted per verb.
"""

from __future__ import annotations

import json

from .cluster import Cluster


def test_a_user_has_what_rbac_grants_and_the_audit_log_says_so(cluster: Cluster,
                                                                namespace: str) -> None:
    window = cluster.audit.window() if cluster.audit is not None else None
    alice = cluster.user_kubeconfig("alice@example.com", ["team-a"])
    whoami = json.loads(cluster.kubectl("auth", "whoami", "-o", "json",
                                        kubeconfig=alice).stdout)["status"]["userInfo"]
    assert whoami["username"] == "alice@example.com"
    assert "team-a" in whoami["groups"]

    cluster.grant(namespace, group="team-a", role="pod-reader",
                  rules=[{"apiGroups": [""], "resources": ["pods"], "verbs": ["list"]}])
    allowed = cluster.kubectl("get", "pods", "-n", namespace, kubeconfig=alice, check=False)
    assert allowed.returncode == 0, allowed.stderr
    refused = cluster.kubectl("get", "pods", "-n", "default", kubeconfig=alice, check=False)
    assert refused.returncode != 0 and "forbidden" in refused.stderr, refused.stderr
    refused = cluster.kubectl("create", "configmap", "mine", "-n", namespace, kubeconfig=alice,
                              check=False)
    assert refused.returncode != 0 and "forbidden" in refused.stderr, refused.stderr

    if window is not None:
        requests = [r for r in window.requests("alice@example.com") if r.resource == "pods"]
        assert {(r.verb, r.namespace, r.code) for r in requests} >= {
            ("list", namespace, 200), ("list", "default", 403)}
        assert window.counts("alice@example.com")["list"] >= 2
        # `kubectl auth whoami` creates a SelfSubjectReview; a refused create still counts.
        writes = {(w.verb, w.resource, w.code) for w in window.writes("alice@example.com")}
        assert writes == {("create", "selfsubjectreviews", 201),
                          ("create", "configmaps", 403)}, writes
