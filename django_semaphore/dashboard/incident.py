"""What an operator asks first in an incident, added to the dashboard's rows for the page and its JSON.

How many are let in, turned away and timed out per second right now, since
when the counts run, how long the admitted wait and hold (median and 95th
percentile), the outcomes over time next to use over time, and, for an
adaptive limit, where it stands and why it last moved (the fields
``semaphore_status`` prints from the same ``adaptive`` dict).
"""

from __future__ import annotations

from typing import Any

from django.utils.translation import gettext

from ..core.safe_text import for_terminal
from ..core.tally import BOUNDS, SLOT_MS
from ..ops.overview import duration
from . import activity, clock
from .chart import MIN_WINDOW_MS, WINDOW_MS, outcomes_chart


def seconds_shown(value: float | None) -> str:
    """A percentile for a narrow cell: 0.75 ms, 12.5 ms, 2.5 s; at the last bound, "≥ 300 s"."""
    if value is None:
        return "-"
    if value >= BOUNDS[-1]:
        return f"≥ {BOUNDS[-1]:g} s"
    if value < 1:
        return f"{value * 1000:.3g} ms"
    return f"{value:.3g} s"


def _rate(value: float) -> str:
    return f"{value:.2f}" if value < 10 else f"{value:.1f}" if value < 100 else f"{value:.0f}"


def _axis(now_ms: int, window_ms: int) -> list[str]:
    """The time axis's values, left to right: the window's start, its middle, now."""
    return [clock.at(now_ms - window_ms + step * window_ms // 2, clock.MINUTES) for step in range(2)] + [
        clock.at(now_ms, clock.TIME)
    ]


def _window(row: dict[str, Any], slots: dict[int, dict[str, int]], now_ms: int) -> int:
    """The usage chart's span when there is one (the two charts share their time axis), else the counts' own."""
    if row.get("chart"):
        return int(row["chart"]["window_ms"])
    oldest = activity.oldest_slot(slots, now_ms) * SLOT_MS
    return min(max(now_ms - oldest, MIN_WINDOW_MS), WINDOW_MS)


def _decorate(row: dict[str, Any], found: dict[str, Any]) -> None:
    now_ms = found["now_ms"]
    slots = found.pop("slots")
    window_ms = _window(row, slots, now_ms)
    first = (now_ms - window_ms) // SLOT_MS
    found["since"] = None if found["since_ms"] is None else clock.at(found["since_ms"])
    found["since_shown"] = found["since"] or gettext("nothing counted yet")
    found["per_second_shown"] = {result: _rate(value) for result, value in found["per_second"].items()}
    for kind in ("wait", "hold"):
        found[kind]["p50_shown"] = seconds_shown(found[kind]["p50"])
        found[kind]["p95_shown"] = seconds_shown(found[kind]["p95"])
    found["chart"] = outcomes_chart(activity.per_slot(slots, first, now_ms // SLOT_MS), first, now_ms, window_ms)
    row["activity"] = found
    row["time_axis"] = _axis(now_ms, window_ms)
    if row.get("chart"):
        row["chart"]["x_axis"] = row["time_axis"]
    adaptive = row.get("adaptive")
    if adaptive:
        adaptive["target_shown"] = seconds_shown(adaptive["target_s"]) if adaptive["target_s"] is not None else None
        adaptive["best_shown"] = seconds_shown(adaptive["best_hold_s"])
        moved = adaptive["changed_at_ms"]
        adaptive["moved_ago"] = None if moved is None else duration(max(now_ms - moved, 0) / 1000)
        adaptive["moved_at"] = None if moved is None else clock.at(moved)
        adaptive["reason_shown"] = None if adaptive["reason"] is None else for_terminal(adaptive["reason"])


def add_activity(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Each row with its ``activity`` and axes: one round trip for all of them, whatever their partitions."""
    names = list(dict.fromkeys(row["name"] for row in rows))
    now_ms = max((row["now_ms"] for row in rows if row.get("now_ms") is not None), default=None)
    found = activity.read(names, now_ms)
    for row in rows:
        _decorate(row, dict(found[row["name"]]))
    return rows
