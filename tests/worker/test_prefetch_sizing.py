"""How many jobs a worker holds unstarted (antre.prefetch): what finishes during two claim round
trips, at most the setting; none for jobs much longer than a round trip, none until measured,
none with prefetch 0; a jittery round trip counts as a slow one; a deep buffer is topped up in
batches, a free slot with nothing to start claims at once; jobs held beyond the buffer are handed
back once the oldest has waited a few slow round trips."""

from __future__ import annotations

import pytest
from antre.prefetch import HAND_BACK_MIN_S, PrefetchSizer, jobs_to_claim, jobs_to_hand_back


def sized(limit: int, *, rtt_s: float, gap_s: float, completions: int = 40) -> int:
    sizer = PrefetchSizer(limit)
    for i in range(completions):
        sizer.claimed(rtt_s)
        sizer.finished(i * gap_s)
    return sizer.size((completions - 1) * gap_s)


@pytest.mark.parametrize(("limit", "rtt_s", "gap_s", "expected"), [
    pytest.param(16, 0.002, 0.001, 4, id="short-jobs-cover-two-round-trips"),
    pytest.param(16, 0.010, 0.0005, 16, id="slow-network-capped-by-the-setting"),
    pytest.param(16, 0.001, 60.0, 0, id="minute-long-jobs-none-ahead"),
    pytest.param(16, 0.001, 0.004, 1, id="half-a-job-per-two-round-trips-one-ahead"),
    pytest.param(16, 0.001, 0.005, 0, id="under-half-a-job-none-ahead"),
    pytest.param(0, 0.010, 0.0005, 0, id="prefetch-off"),
])
def test_size_follows_completions_and_round_trips(limit: int, rtt_s: float, gap_s: float,
                                                  expected: int) -> None:
    assert sized(limit, rtt_s=rtt_s, gap_s=gap_s) == expected


def test_none_until_enough_was_measured() -> None:
    sizer = PrefetchSizer(16)
    assert sizer.size(0.0) == 0
    for i in range(4):  # a burst of a few completions says little about the rate
        sizer.claimed(0.001)
        sizer.finished(1.0 + i * 1e-5)
    assert sizer.size(1.0) == 0
    assert PrefetchSizer(0).size(0.0) == 0


def test_bursts_of_long_jobs_get_none_ahead() -> None:
    """Four slots of 0.15 s jobs finish together: the rate over the window, not the tiny gaps
    inside a burst, sizes the buffer."""
    sizer = PrefetchSizer(4)
    for burst in range(10):
        sizer.claimed(0.002)
        for slot in range(4):
            sizer.finished(burst * 0.15 + slot * 1e-4)
    assert sizer.size(9 * 0.15 + 0.01) == 0


def test_a_stall_shrinks_the_buffer_at_once() -> None:
    sizer = PrefetchSizer(16)
    for i in range(40):
        sizer.claimed(0.002)
        sizer.finished(i * 0.0005)
    assert sizer.size(40 * 0.0005) == 8
    assert sizer.size(40 * 0.0005 + 5.0) == 0  # nothing finished for 5 s


def test_a_jittery_round_trip_counts_as_a_slow_one() -> None:
    """On a busy host the claim's reply often waits for a core: the buffer covers a slow round
    trip (the smoothed one plus four mean deviations), not the average, which ran dry."""
    steady, jittery = PrefetchSizer(64), PrefetchSizer(64)
    for i in range(40):
        steady.claimed(0.002)
        jittery.claimed(0.0005 if i % 2 else 0.0035)  # also 2 ms on average
        steady.finished(i * 0.001)
        jittery.finished(i * 0.001)
    assert steady.size(0.039) == 4
    assert jittery.size(0.039) >= 12
    minute_jobs = PrefetchSizer(16)
    for i in range(40):
        minute_jobs.claimed(0.0005 if i % 2 else 0.020)
        minute_jobs.finished(i * 60.0)
    assert minute_jobs.size(39 * 60.0) == 0, "still none ahead for jobs far longer than a claim"


@pytest.mark.parametrize(("busy", "waiting", "buffer", "expected"), [
    pytest.param(10, 0, 4, 10, id="free-slots-and-the-buffer"),
    pytest.param(15, 0, 0, 1, id="no-buffer-a-free-slot"),
    pytest.param(16, 0, 0, 0, id="no-buffer-every-slot-busy"),
    pytest.param(16, 9, 16, 0, id="buffer-more-than-half-full-waits"),
    pytest.param(16, 8, 16, 8, id="buffer-half-gone-refilled-in-one-claim"),
    pytest.param(16, 1, 2, 1, id="small-buffer-half-gone"),
    pytest.param(14, 4, 4, 0, id="every-free-slot-has-a-job-to-start"),
    pytest.param(12, 3, 16, 17, id="a-free-slot-with-nothing-to-start-claims-at-once"),
])
def test_a_deep_buffer_is_topped_up_in_batches(busy: int, waiting: int, buffer: int,
                                               expected: int) -> None:
    assert jobs_to_claim(concurrency=16, busy=busy, waiting=waiting, buffer=buffer) == expected


def test_jobs_held_beyond_the_buffer_are_handed_back() -> None:
    def back(waiting: int, buffer: int, waited_s: float) -> int:
        return jobs_to_hand_back(waiting=waiting, buffer=buffer, waited_s=waited_s, after_s=0.05)

    assert back(2, 0, 0.2) == 2, "the work turned long: every held job back"
    assert back(4, 1, 0.2) == 3, "only the jobs beyond the buffer"
    assert back(2, 0, 0.01) == 0, "not before the oldest has waited the bound"
    assert back(2, 2, 5.0) == 0, "within the buffer: kept"
    assert back(0, 0, 5.0) == 0


def test_the_hand_back_bound_is_a_few_slow_round_trips() -> None:
    assert PrefetchSizer(4).hand_back_after_s() == HAND_BACK_MIN_S, "not measured yet"
    loopback, remote = PrefetchSizer(4), PrefetchSizer(4)
    for _ in range(40):
        loopback.claimed(0.0003)
        remote.claimed(0.030)
    assert loopback.hand_back_after_s() == HAND_BACK_MIN_S
    assert remote.hand_back_after_s() == pytest.approx(4 * 0.030, rel=0.05)
