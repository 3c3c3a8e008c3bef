"""``antre-operator``: run the JobQueue operator (kopf) for some namespaces or the whole cluster.

    antre-operator [--namespace NS ... | --all-namespaces] [--standalone | --peering NAME]
                   [--priority N] [--metrics-port N] [--liveness URL] [--verbose | --debug]
                   [--allowed-image-registry PREFIX ...] [--allowed-service-account NAME ...]
                   [--allowed-redis-host PATTERN ...] [--allowed-api-service-type TYPE ...]
                   [--allow-operator-namespace]

Standalone (no peering) by default: one replica. With ``--peering NAME`` several replicas run
and kopf's peering lets the one with the highest priority act (the kopf peering CRDs must be
installed); without ``--priority`` each process picks a random one, so replicas never tie.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import random
import sys
import threading
from collections.abc import Sequence
from typing import Any

try:
    import kopf
    import kubernetes

    from antre_operator import handlers, kube, reconciling, resolver, settings
except ModuleNotFoundError as exc:  # installed without the operator extra
    if exc.name not in ("kopf", "kubernetes"):
        raise
    sys.stderr.write(f"antre-operator: the module {exc.name!r} is missing; install the operator "
                     "extra: pip install 'antre[operator]'\n")
    raise SystemExit(2) from None

__all__ = ["handlers", "main", "parse_args", "run", "run_in_own_loop"]


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="antre-operator",
        description="Run the JobQueue operator (kopf) for some namespaces or the whole cluster.")
    scope = parser.add_mutually_exclusive_group()
    scope.add_argument("-n", "--namespace", action="append", default=[], metavar="NS",
                       help="serve JobQueues in this namespace (repeatable; globs allowed)")
    scope.add_argument("-A", "--all-namespaces", action="store_true",
                       help="serve JobQueues in every namespace (the default without --namespace)")
    peering = parser.add_mutually_exclusive_group()
    peering.add_argument("--standalone", action="store_true",
                         help="run without peering (the default): only one replica may run")
    peering.add_argument("--peering", metavar="NAME",
                         help="coordinate replicas through this kopf peering object")
    parser.add_argument("--priority", type=int, metavar="N",
                        help="peering priority; the highest one acts (default: random per "
                             "process, so replicas of one Deployment never tie)")
    parser.add_argument("--metrics-port", type=int, default=8000, metavar="N",
                        help="serve Prometheus metrics on this port; 0 disables (default 8000)")
    parser.add_argument("--liveness", metavar="URL",
                        help="kopf's liveness endpoint, e.g. http://0.0.0.0:8080/healthz")
    policy = parser.add_argument_group(
        "what JobQueues may ask for (docs/security.md)",
        "Each allow-list is empty by default (anything); give an option several times for "
        "several entries. A JobQueue asking for more gets a NotAllowed condition and no pods.")
    policy.add_argument("--allowed-image-registry", action="append", default=[],
                        metavar="PREFIX", help="worker images must be under this registry path, "
                        "e.g. ghcr.io/acme (docker.io/library/ for official images)")
    policy.add_argument("--allowed-service-account", action="append", default=[],
                        metavar="NAME", help="a ServiceAccount spec.worker.serviceAccountName "
                        "may name")
    policy.add_argument("--allowed-redis-host", action="append", default=[], metavar="PATTERN",
                        help="a host the operator connects to for a JobQueue (fnmatch pattern, "
                        "e.g. '*.redis.svc.cluster.local'); the hosts of Secret URLs too")
    policy.add_argument("--allowed-api-service-type", action="append", default=[],
                        metavar="TYPE", choices=("ClusterIP", "NodePort", "LoadBalancer"),
                        help="a Service type spec.api.serviceType may name")
    policy.add_argument("--allow-operator-namespace", action="store_true",
                        help="serve JobQueues in the operator's own namespace (POD_NAMESPACE); "
                        "its ServiceAccount stays refused")
    parser.add_argument("-v", "--verbose", action="store_true", help="log more")
    parser.add_argument("--debug", action="store_true", help="log everything, kopf included")
    args = parser.parse_args(argv)
    if not 0 <= args.metrics_port <= 65535:
        parser.error(f"--metrics-port: got {args.metrics_port}; must be between 0 and 65535")
    return args


def settings_from_args(args: argparse.Namespace) -> settings.OperatorSettings:
    policy = settings.JobQueuePolicy(
        allow_operator_namespace=args.allow_operator_namespace,
        image_registries=tuple(args.allowed_image_registry),
        service_accounts=tuple(args.allowed_service_account),
        redis_hosts=tuple(args.allowed_redis_host),
        api_service_types=tuple(args.allowed_api_service_type))
    return settings.OperatorSettings.from_env(
        policy=policy,
        namespaces=tuple(args.namespace),
        peering=args.peering,
        metrics_port=args.metrics_port or None,
        priority=args.priority if args.priority is not None else random.randint(1, 1_000_000),
    )


async def run(ours: settings.OperatorSettings, *, stop_flag: threading.Event | None = None,
              ready_flag: threading.Event | None = None, liveness: str | None = None) -> None:
    """Run the operator until ``stop_flag`` is set (or forever); the tests call this too."""
    state = reconciling.OperatorState(settings=ours)
    await kopf.operator(
        clusterwide=not ours.namespaces,
        namespaces=ours.namespaces,
        standalone=ours.peering is None,
        peering_name=ours.peering,
        priority=ours.priority,
        liveness_endpoint=liveness,
        memo=kopf.Memo(state=state),
        stop_flag=stop_flag,
        ready_flag=ready_flag,
    )


def run_in_own_loop(ours: settings.OperatorSettings, **options: Any) -> None:
    """:func:`run` in a new event loop whose name lookups no JobQueue can hold up for the
    others (:mod:`antre_operator.resolver`), until it returns."""
    with asyncio.Runner(loop_factory=resolver.ResolvingLoop) as runner:
        runner.run(run(ours, **options))


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    kopf.configure(verbose=args.verbose, debug=args.debug)
    try:
        ours = settings_from_args(args)
    except ValueError as exc:
        print(f"antre-operator: {exc}", file=sys.stderr)
        return 2
    try:  # before kopf starts, so a missing credential is one line, not a failed activity
        kube.load_configuration()
    except kubernetes.config.ConfigException as exc:
        print(f"antre-operator: no Kubernetes credentials: {exc} (in a pod: its ServiceAccount "
              "token; elsewhere: KUBECONFIG or ~/.kube/config)", file=sys.stderr)
        return 2
    logging.getLogger("antre_operator").setLevel(logging.DEBUG if args.verbose else logging.INFO)
    with contextlib.suppress(KeyboardInterrupt):
        run_in_own_loop(ours, liveness=args.liveness)
    return 0


if __name__ == "__main__":
    sys.exit(main())
