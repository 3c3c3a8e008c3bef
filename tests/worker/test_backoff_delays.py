"""backoff.py as a pure function: full jitter inside [0, ceiling], ceilings doubling up to the cap."""

from __future__ import annotations

import random

import pytest
from antre import Backoff, InvalidArgument
from hypothesis import given
from hypothesis import strategies as st

bases = st.floats(min_value=0.001, max_value=100, allow_nan=False)


@given(base=bases, factor=st.floats(min_value=1, max_value=1000), attempt=st.integers(-5, 200),
       seed=st.integers(0, 2**32))
def test_delay_is_inside_zero_and_the_ceiling(base, factor, attempt, seed):
    backoff = Backoff(base_s=base, max_s=base * factor)
    ceiling = backoff.ceiling_ms(attempt)
    assert 0 <= ceiling <= int(backoff.max_s * 1000)
    assert 0 <= backoff.delay_ms(attempt, random.Random(seed)) <= ceiling


@given(base=bases, factor=st.floats(min_value=1, max_value=1000), attempt=st.integers(1, 100))
def test_ceiling_doubles_until_the_cap(base, factor, attempt):
    backoff = Backoff(base_s=base, max_s=base * factor)
    expected = min(backoff.max_s, base * 2 ** (attempt - 1))
    assert backoff.ceiling_ms(attempt) == int(expected * 1000)
    assert backoff.ceiling_ms(attempt + 1) >= backoff.ceiling_ms(attempt)


def test_jitter_spreads_delays():
    rng = random.Random(7)
    delays = [Backoff(base_s=1, max_s=60).delay_ms(4, rng) for _ in range(200)]
    assert min(delays) < 2000 and max(delays) > 6000  # ceiling 8000 ms


@pytest.mark.parametrize(("kwargs", "message"), [
    pytest.param({"base_s": 0}, "backoff base: got 0; must be > 0 seconds", id="zero-base"),
    pytest.param({"base_s": 5, "max_s": 1}, r"backoff max: got 1; must be >= the base \(5 s\)",
                 id="cap-below"),
])
def test_invalid_backoff(kwargs, message):
    with pytest.raises(InvalidArgument, match=message):
        Backoff(**kwargs)
