"""Kubernetes label selectors and NetworkPolicy peers, evaluated as the API server defines them.

A plain reading of the API reference (LabelSelector, NetworkPolicyPeer) for the chart tests,
which have no API server; tests/e2e/test_network_policy.py asks the real one the same questions
and so checks this reading too.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

Labels = Mapping[str, str]

#: In a set of allowed ports: a rule without ports, which allows every port.
ANY_PORT = 0


def matches(selector: Mapping[str, Any], labels: Labels) -> bool:
    """Whether a LabelSelector selects an object with these labels; {} selects everything."""
    if any(labels.get(key) != value for key, value in (selector.get("matchLabels") or {}).items()):
        return False
    for expression in selector.get("matchExpressions") or []:
        key, operator = expression["key"], expression["operator"]
        values = expression.get("values") or []
        if operator == "In" and labels.get(key) not in values:
            return False
        if operator == "NotIn" and key in labels and labels[key] in values:
            return False
        if operator == "Exists" and key not in labels:
            return False
        if operator == "DoesNotExist" and key in labels:
            return False
    return True


def as_query(selector: Mapping[str, Any]) -> str:
    """A LabelSelector in the ?labelSelector= syntax of list requests."""
    terms = [f"{key}={value}" for key, value in (selector.get("matchLabels") or {}).items()]
    for expression in selector.get("matchExpressions") or []:
        key, operator = expression["key"], expression["operator"]
        values = ",".join(expression.get("values") or [])
        terms.append({"In": f"{key} in ({values})", "NotIn": f"{key} notin ({values})",
                      "Exists": key, "DoesNotExist": f"!{key}"}[operator])
    return ",".join(terms)


@dataclass(frozen=True)
class Pod:
    """A pod as a NetworkPolicy sees it: its namespace (with the namespace's labels) and labels."""

    name: str
    namespace: str
    labels: Labels
    namespace_labels: Labels = field(default_factory=dict)

    def __post_init__(self) -> None:
        # Set by the API server on every namespace.
        object.__setattr__(self, "namespace_labels", {
            **self.namespace_labels, "kubernetes.io/metadata.name": self.namespace})


def peer_admits(peer: Mapping[str, Any], policy_namespace: str, pod: Pod) -> bool:
    """Whether one NetworkPolicyPeer (podSelector and/or namespaceSelector) covers a pod."""
    if "ipBlock" in peer:
        return False  # pod addresses are not known here
    if "namespaceSelector" in peer:
        if not matches(peer["namespaceSelector"], pod.namespace_labels):
            return False
    elif pod.namespace != policy_namespace:
        return False
    return matches(peer.get("podSelector") or {}, pod.labels)


def ingress_ports(policy: Mapping[str, Any], pod: Pod) -> set[int]:
    """The TCP ports of the policy's pods that ``pod`` may connect to."""
    namespace = policy["metadata"]["namespace"]
    allowed: set[int] = set()
    for rule in policy["spec"].get("ingress") or []:
        peers = rule.get("from")
        if peers is None or any(peer_admits(peer, namespace, pod) for peer in peers):
            ports = rule.get("ports")
            allowed |= {port["port"] for port in ports if port.get("protocol", "TCP") == "TCP"
                        } if ports else {ANY_PORT}
    return allowed


def selects(policy: Mapping[str, Any], pod: Pod) -> bool:
    return (pod.namespace == policy["metadata"]["namespace"]
            and matches(policy["spec"]["podSelector"], pod.labels))
