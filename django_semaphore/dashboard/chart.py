"""Recent utilisation (up to the last hour) as SVG coordinates.

The server computes the points and the page only sets them on an inline
``<svg>``: no chart library, no CDN, nothing to load offline, and the same
numbers whether the page was rendered or refreshed by the JSON endpoint.
"""

from __future__ import annotations

from typing import Any

WIDTH = 360  # one unit per 10 s sample over an hour
HEIGHT = 60
# The window spans the history there is, between these bounds: a young
# semaphore's first minutes fill the chart instead of a sliver at its edge.
WINDOW_MS = 3_600_000
MIN_WINDOW_MS = 300_000


def _xy(at_ms: int, value: int, now_ms: int, top: int, window_ms: int) -> str:
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
    }
