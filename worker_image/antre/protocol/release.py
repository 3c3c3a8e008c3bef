"""Release: give leased jobs back to the head of the queue (:file:`release.lua`).

What a graceful shutdown does with the jobs that did not finish within the grace period, and
what a worker does with prefetched jobs it holds beyond its buffer once the work turns long
(a hand-back). The two are told apart by their event, in the job's history and the queue's
stats: ``released`` is what operators watch for shutdowns that cut work short, and routine
hand-backs must not drown it. The first :data:`FREE_RELEASES` releases of a job give its
attempt back; later ones spend it, so a job that never finishes within a grace period ends
dead instead of looping between workers. A run that never started (prefetched, or a claim
given back) always gets its attempt back, and is not counted among those releases.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from typing import Any, Final, Literal

from antre.protocol.scripts import Lease, Op, ScriptArg, load
from antre.settings import QueueSettings

#: Releases per job that do not spend an attempt.
FREE_RELEASES: Final = 3

#: The history event and stats counter of a release: runs a shutdown or a late renewal
#: interrupted, or a claim given back (``released``), or prefetched jobs handed back unstarted
#: because the work outgrew the buffer (``handed_back``).
ReleaseEvent = Literal["released", "handed_back"]

#: What a release did to each job: back in the queue (under the call's event), dead-lettered (a
#: release that spent its last attempt), or None: not the lease holder, nothing changed.
ReleaseOutcome = Literal["released", "handed_back", "dead"] | None


def release_op(settings: QueueSettings, leases: Sequence[Lease], *, worker_id: str,
               reason: str, keep_locks: Collection[str] = (),
               unstarted: Collection[str] = (),
               event: ReleaseEvent = "released") -> Op[list[ReleaseOutcome]]:
    """Returns, per lease, what became of its job (:data:`ReleaseOutcome`). Jobs whose id is
    in ``keep_locks`` keep their resource lock: their run may still be going (a thread that
    cannot be stopped), and the next attempt waits for the lock like any other job. Jobs whose
    id is in ``unstarted`` never ran under this lease: their attempt is given back however
    often they were released before (unless the lease's deadline has passed)."""
    k = settings.keys
    args: list[ScriptArg] = [k.job_prefix, k.lock_prefix, worker_id, reason, FREE_RELEASES,
                             k.waiting_prefix, event]
    for job_id, token in leases:
        state = 1 if job_id in keep_locks else 2 if job_id in unstarted else 0
        args.extend((job_id, token, state))
    outcomes: dict[int, ReleaseOutcome] = {1: event, 2: "dead", 0: None}

    def parse(reply: list[Any]) -> list[ReleaseOutcome]:
        return [outcomes[int(flag)] for flag in reply]

    return Op(load("release"), [k.ready, k.processing, k.stats, k.dead, k.retry], args, parse)
