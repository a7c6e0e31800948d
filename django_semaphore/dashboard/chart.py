"""Recent utilisation (up to the last hour) as SVG coordinates.

The server computes the points and the page only sets them on an inline
``<svg>``: no chart library, no CDN, nothing to load offline, and the same
numbers whether the page was rendered or refreshed by the JSON endpoint.
"""

from __future__ import annotations

import math
from typing import Any

from ..core.tally import SLOT_MS

WIDTH = 360  # one unit per 10 s sample over an hour
HEIGHT = 60
# The window spans the history there is, between these bounds: a young
# semaphore's first minutes fill the chart instead of a sliver at its edge.
WINDOW_MS = 3_600_000
MIN_WINDOW_MS = 300_000


def _xy(at_ms: int, value: float, now_ms: int, top: float, window_ms: int) -> str:
    x = max(WIDTH - (now_ms - at_ms) / window_ms * WIDTH, 0.0)
    y = HEIGHT - min(value, top) / top * HEIGHT
    return f"{x:.1f},{y:.1f}"


def utilisation_chart(
    history: list[dict[str, Any]], limit: int, now_ms: int, used_now: int, waiting_now: int
) -> dict[str, Any]:
    """Points for the used area, the waiting line and the limit line, scaled to fit the busiest sample.

    The lines end at the current reading, so they reach "now" even when the
    last sample is minutes old (samples are only taken while scripts run).
    The limit line follows the limit in force at each sample (an adaptive
    limit, an override set and cleared) as a step: it holds from one sample to
    the next. Samples written before the limit was recorded show the current one.
    """
    samples = sorted(history, key=lambda s: s["at_ms"])
    samples.append({"at_ms": now_ms, "peak_used": used_now, "waiting": waiting_now, "limit": limit})
    limits = [limit if s.get("limit") is None else s["limit"] for s in samples]
    top = max([*limits, 1, *(s["peak_used"] for s in samples), *(s["waiting"] for s in samples)])
    window_ms = min(max(now_ms - samples[0]["at_ms"], MIN_WINDOW_MS), WINDOW_MS)
    used = [_xy(s["at_ms"], s["peak_used"], now_ms, top, window_ms) for s in samples]
    if used:
        first_x, last_x = used[0].split(",")[0], used[-1].split(",")[0]
        used = [f"{first_x},{HEIGHT}", *used, f"{last_x},{HEIGHT}"]
    steps = [f"0.0,{_xy(samples[0]['at_ms'], limits[0], now_ms, top, window_ms).split(',')[1]}"]
    for s, value in zip(samples, limits, strict=True):
        x, y = _xy(s["at_ms"], value, now_ms, top, window_ms).split(",")
        steps += [f"{x},{steps[-1].split(',')[1]}", f"{x},{y}"]
    steps.append(f"{WIDTH:.1f},{steps[-1].split(',')[1]}")
    return {
        "limit": " ".join(steps),
        "used": " ".join(used),
        "waiting": " ".join(_xy(s["at_ms"], s["waiting"], now_ms, top, window_ms) for s in samples),
        "limit_y": round(HEIGHT - limit / top * HEIGHT, 1),
        "top": top,
        "samples": len(samples) - 1,
        "window_minutes": round(window_ms / 60_000),
        "window_ms": window_ms,
        "y_axis": y_axis(top),
    }


def nice_top(value: float) -> float:
    """The smallest of 1, 2, 5 times a power of ten at or above ``value``: a scale a reader takes in at once."""
    if value <= 0:
        return 1.0
    power = 10.0 ** math.floor(math.log10(value))
    return float(next(step * power for step in (1, 2, 5, 10) if step * power >= value * (1 - 1e-9)))


def _tick(value: float) -> str:
    return f"{value:.2f}".rstrip("0").rstrip(".") if value != int(value) else str(int(value))


def y_axis(top: float) -> list[str]:
    """The vertical axis's values, top to bottom: its top, half of it, and 0."""
    return [_tick(top), _tick(top / 2), "0"]


def outcomes_chart(series: dict[str, list[int]], first_slot: int, now_ms: int, window_ms: int) -> dict[str, Any]:
    """Each outcome per second as a step line, one step per whole slot, over the same window as the usage chart.

    ``series`` holds each outcome's count per slot from ``first_slot`` to
    the current one; the current slot, still filling (counts arrive in
    batches), is left out: a step drawn from part of a slot would read as a
    drop. The scale is a round number at or above the busiest slot's rate.
    """
    current = now_ms // SLOT_MS
    rates = {
        name: [count * 1000 / SLOT_MS for count in counts[: current - first_slot]] for name, counts in series.items()
    }
    top = nice_top(max((rate for values in rates.values() for rate in values), default=0.0))
    lines = {}
    for name, values in rates.items():
        points = []
        for index, rate in enumerate(values):
            start = (first_slot + index) * SLOT_MS
            if start + SLOT_MS <= now_ms - window_ms:
                continue
            points += [_xy(start, rate, now_ms, top, window_ms), _xy(start + SLOT_MS, rate, now_ms, top, window_ms)]
        # An outcome that did not happen draws nothing, rather than a line along the axis over the others.
        lines[name] = " ".join(points) if any(values) else ""
    return {**lines, "top": top, "y_axis": y_axis(top), "window_ms": window_ms}
