"""How many jobs a worker claims ahead of its free slots: enough to keep every slot busy while
its next claim is on the wire, and no more.

A prefetched job waits in one worker while another may be idle, so the buffer is sized from
what the worker measures: jobs finishing per second times the claim's round trip, twice over
(the claim is sent when a slot frees and its jobs arrive one round trip later), bounded by the
``prefetch`` setting. The round trip counted is a slow one, not the average: the smoothed
round trip plus four times its mean deviation, as TCP sizes its retransmission timeout (RFC
6298). On a busy host the claim's reply often waits for a core; sized on the average, the buffer
ran dry at about a third of the slot frees (plain ``def`` handlers of 10 ms at concurrency 16),
each such slot then idle for a whole claim.

Short jobs on a slow network get a deep buffer; jobs that take much longer than a claim's round
trip get none (one claim per free slot costs them nothing), so a busy worker never sits on a job
that an idle worker, or a new one the operator just started, could run: a job of ten seconds
never waits ten more behind another. Nothing is prefetched until the
rate has been measured. Jobs already held when the work turns long are handed back: once the
buffer holds more than its size and the oldest has waited four slow round trips (at least
HAND_BACK_MIN_S), the excess, newest first, goes back to the head of the queue unstarted, its
attempt refunded. Before, jobs prefetched during a run of short ones waited behind the long
ones that followed while another worker sat idle.
"""

from __future__ import annotations

import collections
import math

#: Weights of the newest round trip in the smoothed round trip and in its mean deviation, and
#: how many deviations are added to it (RFC 6298's alpha, beta and K).
RTT_WEIGHT = 0.125
DEVIATION_WEIGHT = 0.25
DEVIATIONS = 4
#: Completions the rate is measured over; fewer than MIN_COMPLETIONS measured: none.
WINDOW = 32
MIN_COMPLETIONS = 8
#: Jobs held beyond the buffer's size are handed back once the oldest held has waited this
#: many slow round trips, and never sooner than HAND_BACK_MIN_S (a loopback round trip is
#: a fraction of a millisecond: the worker checks that often while it holds jobs).
HAND_BACK_ROUND_TRIPS = 4
HAND_BACK_MIN_S = 0.05


class PrefetchSizer:
    def __init__(self, limit: int) -> None:
        #: The most jobs ever held unstarted (the ``prefetch`` setting).
        self.limit = limit
        self._rtt_s: float | None = None
        self._deviation_s = 0.0
        self._done: collections.deque[float] = collections.deque(maxlen=WINDOW)

    def claimed(self, rtt_s: float) -> None:
        """A claim (not waiting for jobs) took ``rtt_s`` from send to reply."""
        if self._rtt_s is None:
            self._rtt_s, self._deviation_s = rtt_s, rtt_s / 2
        else:
            self._deviation_s += DEVIATION_WEIGHT * (abs(rtt_s - self._rtt_s) - self._deviation_s)
            self._rtt_s += RTT_WEIGHT * (rtt_s - self._rtt_s)

    def finished(self, now: float) -> None:
        """A run ended at ``now`` (monotonic seconds)."""
        self._done.append(now)

    def size(self, now: float) -> int:
        """Jobs to hold unstarted at ``now``: what finishes during two slow claim round trips,
        rounded (none when that is under half a job), at most the setting."""
        if self.limit <= 0 or self._rtt_s is None or len(self._done) < MIN_COMPLETIONS:
            return 0
        # Mean time between completions over the window (jobs often end in bursts), or the
        # time since the last one when the work has slowed down since.
        gap_s = max((self._done[-1] - self._done[0]) / (len(self._done) - 1),
                    now - self._done[-1], 1e-6)
        slow_rtt_s = self._rtt_s + DEVIATIONS * self._deviation_s
        return min(self.limit, math.floor(2 * slow_rtt_s / gap_s + 0.5))

    def hand_back_after_s(self) -> float:
        """How long the oldest job held must have waited before jobs beyond the buffer's size
        are handed back: HAND_BACK_ROUND_TRIPS slow round trips, at least HAND_BACK_MIN_S."""
        if self._rtt_s is None:
            return HAND_BACK_MIN_S
        slow_rtt_s = self._rtt_s + DEVIATIONS * self._deviation_s
        return max(HAND_BACK_ROUND_TRIPS * slow_rtt_s, HAND_BACK_MIN_S)


def jobs_to_claim(*, concurrency: int, busy: int, waiting: int, buffer: int) -> int:
    """Jobs to claim now: the free slots, plus room in a prefetch buffer of ``buffer`` jobs,
    given ``busy`` slots and ``waiting`` jobs held unstarted. While every free slot has a job to
    start, the buffer is topped up only once half of it is gone: refilled a job at a time, a
    deep buffer cost a claim per job or two (no-op jobs: 0.114 script calls per job against
    0.090)."""
    if busy + waiting >= concurrency and waiting > buffer // 2:
        return 0
    return concurrency + buffer - busy - waiting


def jobs_to_hand_back(*, waiting: int, buffer: int, waited_s: float, after_s: float) -> int:
    """Prefetched jobs to give back to the queue now: of ``waiting`` jobs held unstarted (the
    oldest for ``waited_s``), those beyond a buffer of ``buffer`` jobs, once the oldest has
    waited ``after_s``. A buffer that shrank for a moment (jobs finishing in bursts) is left
    alone; one the work outgrew is not held behind jobs that will not end soon."""
    if waiting <= buffer or waited_s < after_s:
        return 0
    return waiting - buffer
