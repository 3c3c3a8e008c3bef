"""``python -m antre_operator.uninstall``: delete one JobQueue and wait until it is gone.

    python -m antre_operator.uninstall --namespace NS --name NAME [--timeout SECONDS]

The Helm chart's pre-delete hook runs it (in the operator image) for the chart's own example
JobQueue. Every JobQueue carries the operator's finalizer, and ``helm uninstall`` deletes
custom resources last, after the operator and its RBAC: deleting the example first, while the
operator still runs to remove its finalizer, is what lets a plain uninstall leave nothing
Terminating.

The JobQueue is the object read first, by its uid: the delete carries it as a precondition, and
"gone" means no object with that uid. Another JobQueue given the name meanwhile is not deleted;
it fails the run (see :func:`delete_and_wait` for why).

Exit codes (the chart's Job tells them apart in its ``podFailurePolicy``):

* 0 (:data:`EXIT_GONE`): the JobQueue no longer exists (one already gone counts);
* 2 (:data:`EXIT_USAGE`): bad arguments, argparse's one line;
* 3 (:data:`EXIT_FAILED`): the program's own verdict, one line on stderr naming the JobQueue and
  what went wrong (refused, no credentials, unreachable or still there at the deadline, another
  JobQueue in its place), which the pod's termination message carries to ``kubectl describe``.
  Another pod would only wait as long again for the same answer (or read the JobQueue in its
  place and delete it, which this run refused to), so the Job fails at once.

Anything else is not the program's verdict: 1 is Python's own exit for an uncaught exception (a
crash, worth one more pod), 137 a kill (OOM, the node), 143 a SIGTERM (the pod deleted).
"""

from __future__ import annotations

import argparse
import asyncio
import math
import sys
import time
from collections.abc import Mapping, Sequence
from typing import Any, Final

import kubernetes

from antre_operator import kube, settings

#: Seconds between two reads while the JobQueue is Terminating: the operator needs about one
#: reconcile pass to remove its finalizer, so a second is quick enough and costs the API little.
POLL_INTERVAL_S: Final = 1.0
#: Bound on one request; the overall deadline bounds the whole run.
REQUEST_TIMEOUT_S: Final = 10.0
#: Answers worth asking again before the deadline: no answer, and the API server's own trouble.
#: A refusal (403) or a bad request will not change by waiting.
TRANSIENT: Final = frozenset({0, 429, 500, 502, 503, 504})
#: Exit codes, see the module docstring. Not 1, which Python gives an uncaught exception too:
#: the chart's Job must tell a verdict from a crash.
EXIT_GONE: Final = 0
EXIT_USAGE: Final = 2
EXIT_FAILED: Final = 3


class UninstallFailed(Exception):
    """The JobQueue could not be deleted, or was still there at the deadline."""


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m antre_operator.uninstall",
        description="Delete one JobQueue and wait until it is gone (the Helm chart's "
                    "pre-delete hook for its example JobQueue).")
    parser.add_argument("--namespace", required=True, help="the JobQueue's namespace")
    parser.add_argument("--name", required=True, help="the JobQueue's name")
    parser.add_argument("--timeout", type=float, default=120.0, metavar="SECONDS",
                        help=f"give up (exit {EXIT_FAILED}) if it still exists after this long "
                             f"(default 120)")
    args = parser.parse_args(argv)
    # Comparisons with nan are false and inf has no deadline: both would wait for ever.
    if not 0 < args.timeout < math.inf:
        parser.error("--timeout must be a positive number of seconds")  # exits EXIT_USAGE
    return args


def _what(namespace: str, name: str) -> str:
    return f"{settings.KIND} {namespace}/{name}"


def _why_still_there(obj: dict[str, Any]) -> str:
    """What keeps a deleted JobQueue: its finalizers, and which one is the operator's."""
    finalizers = list((obj.get("metadata") or {}).get("finalizers") or [])
    if not finalizers:
        return "it still exists"
    hint = ("; is the antre operator running and watching this namespace?"
            if settings.FINALIZER in finalizers else "")
    return f"still Terminating with finalizers {', '.join(map(str, finalizers))}{hint}"


def _uid(obj: Mapping[str, Any]) -> str:
    return str(obj["metadata"]["uid"])


def _replaced(what: str, uid: str, other: Mapping[str, Any]) -> str:
    return (f"{what} (uid {uid}) is gone, but another of that name (uid {_uid(other)}) was made "
            f"meanwhile, which this hook leaves alone: delete it yourself, or run helm uninstall "
            f"again to delete it as the example")


async def delete_and_wait(client: kube.KubeClient, namespace: str, name: str, *,
                          timeout_s: float) -> bool:
    """Delete the JobQueue and wait until that object is gone: True when this call deleted
    it (or sent a delete whose answer was lost before it was found gone), False when it was gone
    first. Raises :class:`UninstallFailed`, also when the object
    read is gone but another JobQueue of that name (another uid) stands in its place.

    The delete carries the uid read (a precondition), so it deletes that object or nothing:
    between the read and the delete (or a retry of it) the name may have come to hold another
    JobQueue, someone else's, which the hook leaves alone. Not silently, though: helm deletes
    the release's JobQueue by name once the hook has succeeded, after the operator and its
    RBAC, so a successful hook would leave that one Terminating with the operator's finalizer
    (the very thing the hook is for), or delete a JobQueue nobody asked the hook to. Failing
    stops `helm uninstall` with everything still installed and a line saying why; the user
    decides (a new run of the hook reads, and so deletes, whatever then has the name).
    """
    deadline = time.monotonic() + timeout_s
    what = _what(namespace, name)
    # The object first read: the one to delete and see gone. Read once: a delete retried after
    # no answer still names it, not whatever holds the name by then.
    uid: str | None = None
    answered = False  # the delete has its answer: deleted, or not that object any more
    unanswered = False  # a delete was sent whose answer was lost (it may have deleted it)
    deleted = False
    last: dict[str, Any] | None = None
    last_error: kube.KubeError | None = None
    while True:
        try:
            if uid is None:
                live = await client.get(settings.KIND, namespace, name)
                if live is None:
                    return False
                uid = _uid(live)
            if not answered:
                try:
                    deleted = await client.delete(settings.KIND, namespace, name, uid=uid)
                except kube.Conflict:
                    # The precondition failed: the name holds another uid, so the object read
                    # was deleted by someone else (a uid never comes back) and another made
                    # since. Not ours to delete; the read below says whether one is there now.
                    deleted = False
                else:
                    if not deleted:
                        # Gone since the read: deleted by the delete whose answer was lost, if
                        # one was sent (likely, its uid was the one read), else by someone else.
                        return unanswered
                answered = True
            last = await client.get(settings.KIND, namespace, name)
            if last is None:
                return deleted
            if _uid(last) != uid:
                raise UninstallFailed(_replaced(what, uid, last))
            last_error = None
        except kube.KubeError as exc:
            if exc.status not in TRANSIENT:
                action = "read or delete" if not answered else "read"
                raise UninstallFailed(f"cannot {action} {what}: {exc}") from None
            last_error = exc
            unanswered = unanswered or (uid is not None and not answered)
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            if last_error is not None:
                raise UninstallFailed(f"{what}: no answer after {timeout_s:g} s: {last_error}")
            assert last is not None
            raise UninstallFailed(
                f"{what} was not deleted within {timeout_s:g} s: {_why_still_there(last)}")
        await asyncio.sleep(min(POLL_INTERVAL_S, remaining))


async def run(namespace: str, name: str, *, timeout_s: float) -> str:
    """What happened, as the line to print; raises :class:`UninstallFailed`."""
    try:
        client = kube.KubeClient(timeout_s=REQUEST_TIMEOUT_S)
    except kubernetes.config.ConfigException as exc:
        raise UninstallFailed(f"cannot delete {_what(namespace, name)}: no Kubernetes "
                              f"credentials: {exc}") from None
    try:
        deleted = await delete_and_wait(client, namespace, name, timeout_s=timeout_s)
    finally:
        await client.close()
    return f"{_what(namespace, name)} {'deleted' if deleted else 'was already gone'}"


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    try:
        print(asyncio.run(run(args.namespace, args.name, timeout_s=args.timeout)), flush=True)
    except UninstallFailed as exc:
        print(f"antre uninstall hook: {exc}", file=sys.stderr, flush=True)
        return EXIT_FAILED
    return EXIT_GONE


if __name__ == "__main__":
    raise SystemExit(main())
