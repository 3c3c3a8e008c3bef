"""The small live charts, as data: rates between depth samples and sparkline geometry.

Pure: a series of :class:`~antre.protocol.depth.Depth` samples (one per live tick, from the depth
script every page and ``antre stats`` read) goes in, numbers and SVG point lists come out. The
templates draw them as inline SVG, so a chart needs no JavaScript library and no network.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import dataclass

from antre import findings
from antre.protocol.depth import Depth


def rate_series(samples: Sequence[Depth]) -> list[findings.Throughput]:
    """Throughput between consecutive samples (one fewer than the samples), computed by
    :func:`antre.findings.throughput` as ``antre inspect`` and ``top`` compute it."""
    series = []
    for before, after in itertools.pairwise(samples):
        step = findings.throughput(before, after)
        if step is not None:
            series.append(step)
    return series


@dataclass(frozen=True, slots=True)
class Sparkline:
    #: SVG polyline points, "x,y x,y ..." inside a width x height box (y grows downwards).
    points: str
    #: The largest value, the top of the box (the chart's scale).
    peak: float
    latest: float | None


def sparkline(values: Sequence[float], *, width: int = 120, height: int = 28,
              floor: float = 1.0) -> Sparkline:
    """Values spread evenly over the width, scaled so the peak (at least ``floor``) touches the
    top; a 1-pixel margin keeps the stroke inside the box."""
    if not values:
        return Sparkline(points="", peak=0.0, latest=None)
    peak = max(max(values), floor)
    usable = height - 2
    step = width / max(len(values) - 1, 1)
    points = " ".join(
        f"{i * step:.1f},{1 + usable - (max(value, 0) / peak) * usable:.1f}"
        for i, value in enumerate(values))
    if len(values) == 1:  # one sample: a flat line, so something is drawn
        points += f" {width:.1f},{points.split(',')[1]}"
    return Sparkline(points=points, peak=peak, latest=values[-1])
