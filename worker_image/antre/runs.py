"""What the worker's parts share about one leased job: :class:`Run`, from claim until its settle
call returns. The worker creates runs; the heartbeat, the ack batcher, the handler threads and
the outcome reports read them."""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field

from antre.jobs import ClaimedJob
from antre.protocol.extend_lease import KeptLock
from antre.protocol.scripts import Lease


@dataclass(slots=True, eq=False)
class Run:
    """One leased job in this process, from claim until its settle call returns."""

    claimed: ClaimedJob
    task: asyncio.Task[None] | None = None
    #: Monotonic clock at the claim.
    started: float = field(default_factory=time.monotonic)
    #: Monotonic time by which the lease must have been renewed, or the run stops being
    #: treated as held (measured from the send of the last renewal that succeeded, less a margin).
    expires_at: float = 0.0
    #: The lease was found gone, or not renewed in time: the result must be discarded.
    lost: bool = False
    #: Shutdown gave the job back: the result must be discarded.
    released: bool = False
    #: The handler returned; the ack or fail call now reports the truth about the lease.
    settling: bool = False
    #: An async handler can be cancelled; a thread cannot, so its slot stays busy until it returns.
    cancellable: bool = False
    #: Trace headers the run's handler and ack spans continue (tracing.record_claim); empty
    #: when no spans are recorded.
    trace_parent: dict[str, str] = field(default_factory=dict)

    @property
    def lease(self) -> Lease:
        return (self.claimed.id, self.claimed.lease)

    @property
    def kept_lock(self) -> KeptLock | None:
        """The resource lock this run holds, as the heartbeat extends a kept one (None without
        a resource)."""
        resource_key = self.claimed.resource_key
        return (resource_key, f"{self.claimed.id}:{self.claimed.lease}") if resource_key else None

    @property
    def elapsed_ms(self) -> float:
        return round((time.monotonic() - self.started) * 1000, 3)
