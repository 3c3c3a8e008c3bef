"""Retry delays: exponential backoff with full jitter (a pure function)."""

from __future__ import annotations

import random
from dataclasses import dataclass

from antre import errors, fields, limits
from antre.fields import setting


@dataclass(frozen=True, slots=True)
class Backoff:
    base_s: float = setting(
        1.0, env="ANTRE_BACKOFF_BASE", flag="--backoff-base", minimum=0, exclusive_minimum=True,
        maximum=limits.MAX_WAIT_S, label="backoff base",
        help="retry delay scale in seconds: a retry waits uniform in [0, min(max, "
             "base * 2^(attempt-1))]")
    max_s: float = setting(
        300.0, env="ANTRE_BACKOFF_MAX", flag="--backoff-max", minimum=0, maximum=limits.MAX_RUN_S,
        label="backoff max",
        help="cap on a retry delay in seconds, at least the base")

    def __post_init__(self) -> None:
        if not self.base_s > 0:
            raise errors.InvalidArgument(f"backoff base: got {self.base_s!r}; must be > 0 seconds")
        fields.check(self)  # types and bounds: no inf, a base of at most a day, a cap of a week
        if not self.max_s >= self.base_s:
            raise errors.InvalidArgument(
                f"backoff max: got {self.max_s!r}; must be >= the base ({self.base_s} s)"
            )

    def ceiling_ms(self, attempt: int) -> int:
        """The upper bound of the delay after ``attempt`` (1-based) failed attempts."""
        exponent = min(max(attempt - 1, 0), 62)
        return int(min(self.max_s, self.base_s * (2**exponent)) * 1000)

    def delay_ms(self, attempt: int, rng: random.Random | None = None) -> int:
        """Full jitter (uniform in [0, ceiling]): retries of many jobs that failed together
        spread out instead of returning as one wave."""
        ceiling = self.ceiling_ms(attempt)
        return int((rng or random).uniform(0, ceiling))
