"""What the templates show, built from readings: pure functions shared by the page handlers and
the live fragments, so a number rendered at page load and a number pushed two seconds later
come from the same code.

Depth numbers are :class:`~antre.protocol.depth.Depth` fields (the depth script), rates are
:func:`antre.findings.throughput`, findings are :func:`antre.findings.diagnose` of a
:class:`~antre.findings.Snapshot`, dead-letter groups are :func:`antre.findings.group_dead`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Final

from antre import findings
from antre.dashboard import charts
from antre.findings import DeadGroup, Finding, Snapshot, Thresholds
from antre.protocol.depth import Depth
from antre.protocol.workers import WorkerEntry


@dataclass(frozen=True, slots=True)
class QueueSummary:
    """One queue as the overview and the top of a queue page show it."""

    name: str
    depth: Depth | None
    throughput: findings.Throughput | None
    backlog_chart: charts.Sparkline
    done_chart: charts.Sparkline
    failed_chart: charts.Sparkline
    #: Why the queue could not be read at the last attempt ("" when it could).
    error: str = ""


def summarize(name: str, history: Sequence[Depth], error: str = "") -> QueueSummary:
    depth = history[-1] if history else None
    series = charts.rate_series(history)
    return QueueSummary(
        name=name, depth=depth, throughput=series[-1] if series else None,
        backlog_chart=charts.sparkline([d.backlog for d in history]),
        done_chart=charts.sparkline([r.done_per_s for r in series]),
        failed_chart=charts.sparkline([r.failed_per_s for r in series]),
        error=error)


@dataclass(frozen=True, slots=True)
class Health:
    """The doctor's view of one queue: findings with actions, workers, resource locks."""

    snapshot: Snapshot
    findings: list[Finding]
    groups: list[DeadGroup]
    workers: Sequence[WorkerEntry]
    stale_heartbeat_s: float

    @property
    def worst(self) -> str:
        """``critical``, ``warning``, ``info`` or ``ok``: the colour of the panel."""
        return str(max(f.severity for f in self.findings)) if self.findings else "ok"


def health(snapshot: Snapshot, thresholds: Thresholds) -> Health:
    return Health(snapshot=snapshot, findings=findings.diagnose(snapshot, thresholds),
                  groups=findings.group_dead(snapshot, thresholds), workers=snapshot.workers,
                  stale_heartbeat_s=thresholds.stale_heartbeat_s)


# -- formatting (Jinja filters) ---------------------------------------------------------------------

#: Shown for a number that is not known (yet): an en dash.
NOTHING: Final = "\u2013"

def number(value: int | float | None) -> str:
    if value is None:
        return NOTHING
    return f"{value:,}" if isinstance(value, int) else f"{value:,.0f}"


def rate(value: float | None) -> str:
    """Jobs per second: one decimal below 10, whole numbers above."""
    if value is None:
        return NOTHING
    return f"{value:.1f}" if value < 10 else f"{value:,.0f}"


def age(seconds: float | None) -> str:
    if seconds is None:
        return NOTHING
    if seconds < 1:
        return "<1 s"
    if seconds < 120:
        return f"{seconds:.0f} s"
    if seconds < 7200:
        return f"{seconds / 60:.0f} min"
    if seconds < 172_800:
        return f"{seconds / 3600:.1f} h"
    return f"{seconds / 86_400:.1f} d"


def clock(ms: int | float | str | None) -> str:
    """A Redis-clock millisecond timestamp as UTC."""
    try:
        value = float(ms)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return NOTHING
    return datetime.fromtimestamp(value / 1000, tz=UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


def since(ms: int | float | str | None, now_ms: int) -> str:
    """``12 s ago`` or ``in 3 min`` relative to the Redis clock."""
    try:
        delta_s = (now_ms - float(ms)) / 1000  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return NOTHING
    return f"{age(delta_s)} ago" if delta_s >= 0 else f"in {age(-delta_s)}"


def first_line(text: str | None, limit: int = 160) -> str:
    line = (text or "").strip().splitlines()[0] if (text or "").strip() else ""
    return line if len(line) <= limit else line[: limit - 1] + "…"


def sendable(text: str) -> str:
    """``text`` as UTF-8 can carry it: a lone surrogate (in a record a foreign producer wrote:
    valid JSON, not valid text) becomes its ``\\udxxx`` escape instead of failing the
    response."""
    try:
        text.encode()
    except UnicodeEncodeError:
        return text.encode("utf-8", "backslashreplace").decode()
    return text


FILTERS = {"number": number, "rate": rate, "age": age, "clock": clock, "since": since,
           "first_line": first_line}
