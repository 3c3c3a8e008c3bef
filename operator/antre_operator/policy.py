"""What a JobQueue may ask of the operator beyond a valid spec: pure checks, no I/O.

``spec.py`` says whether a JobQueue is well formed; this module says whether this operator
serves it, given :class:`settings.JobQueuePolicy`: never in the operator's own namespace (unless
allowed) and never with the operator's ServiceAccount, images only from the allowed registries,
ServiceAccounts only from the allowed names, Redis only on the allowed hosts. A refusal is a
:class:`NotAllowed`, which the reconcile loop reports like a bad spec (a condition and an Event)
and for which it renders nothing.
"""

from __future__ import annotations

import fnmatch
from typing import Final
from urllib.parse import urlsplit

from antre import errors, sentinel_urls

from antre_operator import settings, spec

#: Registries an image without one comes from, and the path Docker Hub puts official images in.
DEFAULT_REGISTRY: Final = "docker.io"
OFFICIAL_IMAGES: Final = "library"


class NotAllowed(spec.InvalidSpec):
    """The JobQueue is well formed, but this operator's policy does not let it have that."""

    reason = "NotAllowed"


def image_repository(image: str) -> str:
    """The image's repository with its registry spelled out and no tag or digest:
    ``python:3.11`` -> ``docker.io/library/python``, ``ghcr.io/acme/app@sha256:..`` ->
    ``ghcr.io/acme/app`` (the rules the container runtimes apply)."""
    name = image.split("@", 1)[0]
    if name.rfind(":") > name.rfind("/"):
        name = name[:name.rfind(":")]
    first, slash, _ = name.partition("/")
    if not slash:
        return f"{DEFAULT_REGISTRY}/{OFFICIAL_IMAGES}/{name}"
    if "." in first or ":" in first or first == "localhost":
        return name
    return f"{DEFAULT_REGISTRY}/{name}"


def image_allowed(image: str, prefixes: tuple[str, ...]) -> bool:
    """Is ``image`` under one of ``prefixes`` (whole path segments: "ghcr.io/acme" allows
    "ghcr.io/acme/app" but not "ghcr.io/acme-evil/app")? Any image when there are none."""
    if not prefixes:
        return True
    repository = image_repository(image)
    return any(repository == prefix.rstrip("/") or repository.startswith(prefix.rstrip("/") + "/")
               for prefix in prefixes)


def redis_hosts(url: str) -> list[str]:
    """The hosts the operator would connect to first for ``url`` (lower case): the server, a
    Cluster's seed node, or every Sentinel. Raises ValueError for a URL without hosts."""
    if sentinel_urls.is_sentinel_url(url):
        try:
            return [host.lower() for host, _ in sentinel_urls.parse_url(url).sentinels]
        except errors.InvalidArgument as exc:
            raise ValueError(str(exc)) from None
    host = urlsplit(url).hostname
    if not host:
        raise ValueError("no host")
    return [host.lower().rstrip(".")]


def check_redis_url(url: str, policy: settings.JobQueuePolicy, *, field: str) -> None:
    """Refuse a URL naming a host outside ``policy.redis_hosts`` (before any connection, so the
    operator never becomes a port scanner for JobQueue authors). Never echoes the URL."""
    if not policy.redis_hosts:
        return
    try:
        hosts = redis_hosts(url)
    except ValueError:
        raise NotAllowed(field, spec.REDACTED, "must name a Redis host") from None
    for host in hosts:
        if not any(fnmatch.fnmatchcase(host, pattern.lower()) for pattern in policy.redis_hosts):
            raise NotAllowed(field, spec.REDACTED,
                             f"names the host {host!r}; this operator connects only to hosts "
                             f"matching {list(policy.redis_hosts)} (operator.jobQueuePolicy."
                             f"redisHosts in the chart)")


def check_jobqueue(jq: spec.JobQueueSpec, policy: settings.JobQueuePolicy) -> None:
    """Raise :class:`NotAllowed` naming the first field this operator does not serve."""
    own_namespace = (policy.operator_namespace is not None
                     and jq.namespace == policy.operator_namespace)
    if own_namespace and not policy.allow_operator_namespace:
        raise NotAllowed("metadata.namespace", jq.namespace,
                         "is the operator's own namespace, where JobQueues are not served: "
                         "create the JobQueue in the namespace of its application")
    account = jq.worker.service_account_name
    if own_namespace and account is not None and account == policy.operator_service_account:
        raise NotAllowed("spec.worker.serviceAccountName", account,
                         "is the operator's own ServiceAccount; its token is never given to "
                         "JobQueue pods")
    if account is not None and policy.service_accounts and account not in policy.service_accounts:
        raise NotAllowed("spec.worker.serviceAccountName", account,
                         f"must be one of {list(policy.service_accounts)} (operator."
                         f"jobQueuePolicy.serviceAccounts in the chart), or absent")
    if not image_allowed(jq.worker.image, policy.image_registries):
        raise NotAllowed("spec.worker.image", jq.worker.image,
                         f"must come from one of {list(policy.image_registries)} "
                         f"(operator.jobQueuePolicy.imageRegistries in the chart)")
    if jq.api.enabled and policy.api_service_types and (
            jq.api.service_type not in policy.api_service_types):
        raise NotAllowed("spec.api.serviceType", jq.api.service_type,
                         f"must be one of {list(policy.api_service_types)} (operator."
                         "jobQueuePolicy.apiServiceTypes in the chart): the API would face the "
                         "network outside the cluster")
    if jq.redis.url is not None:
        check_redis_url(jq.redis.url, policy, field="spec.redis.url")
