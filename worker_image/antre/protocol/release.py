"""Release: give leased jobs back to the head of the queue (:file:`release.lua`).

What a graceful shutdown does with the jobs that did not finish within the grace period. The
first :data:`FREE_RELEASES` releases of a job give its attempt back; later ones spend it, so a
job that never finishes within a grace period ends dead instead of looping between workers. A
run that never started (prefetched, or a claim given back) always gets its attempt back, and is
not counted among those releases.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from typing import Any, Final, Literal

from antre.protocol.scripts import Lease, Op, ScriptArg, load
from antre.settings import QueueSettings

#: Releases per job that do not spend an attempt.
FREE_RELEASES: Final = 3


#: What a release did to each job: back in the queue, dead-lettered (a release that spent
#: its last attempt), or None: not the lease holder, nothing changed.
ReleaseOutcome = Literal["released", "dead"] | None
_OUTCOMES: Final[dict[int, ReleaseOutcome]] = {1: "released", 2: "dead", 0: None}


def release_op(settings: QueueSettings, leases: Sequence[Lease], *, worker_id: str,
               reason: str, keep_locks: Collection[str] = (),
               unstarted: Collection[str] = ()) -> Op[list[ReleaseOutcome]]:
    """Returns, per lease, what became of its job (:data:`ReleaseOutcome`). Jobs whose id is
    in ``keep_locks`` keep their resource lock: their run may still be going (a thread that
    cannot be stopped), and the next attempt waits for the lock like any other job. Jobs whose
    id is in ``unstarted`` never ran under this lease: their attempt is given back however
    often they were released before (unless the lease's deadline has passed)."""
    k = settings.keys
    args: list[ScriptArg] = [k.job_prefix, k.lock_prefix, worker_id, reason, FREE_RELEASES,
                             k.waiting_prefix]
    for job_id, token in leases:
        state = 1 if job_id in keep_locks else 2 if job_id in unstarted else 0
        args.extend((job_id, token, state))

    def parse(reply: list[Any]) -> list[ReleaseOutcome]:
        return [_OUTCOMES[int(flag)] for flag in reply]

    return Op(load("release"), [k.ready, k.processing, k.stats, k.dead, k.retry], args, parse)
