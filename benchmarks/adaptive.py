"""Adaptive limits against fixed ones, on a backend that slows down past a knee (benchmarks/knee.py).

Four runs of the same load, one after the other: the adaptive limit started
far too high and far too low, and the fixed limits a user would likely guess,
half and twice the knee. For each: the limit it settled at (the median over
the last half of the run) and its goodput, requests served per second whose
work took at most ``ACCEPTABLE`` x base (over the whole run, convergence
included). ``--svg PATH`` draws the limit and the work time over time.

Then the same adaptive limit without a ``target``, as a user who sets none
gets it (the default ``window``, 1 s, and ``tolerance``, 2): it cuts only when
the window's average hold passes twice the best one seen, so it settles where
latency has at least doubled, past the knee. Those two runs are in the table,
not in the goodput ratio or the chart.
"""

from __future__ import annotations

import statistics
from typing import Any

from . import knee
from .runtime import Bench

KNEE = knee.Knee(knee=8, base=0.05)
ACCEPTABLE = 1.5  # x base: the latency users accept (2K sits right at 2 x base: not a fair bound)
RULE = {"target": 0.055, "window": 0.25}
CASES: dict[str, dict[str, Any]] = {
    "adaptive, from 40": {"adaptive": {"min": 2, "max": 64, "initial": 40, **RULE}},
    "adaptive, from 1": {"adaptive": {"min": 1, "max": 64, "initial": 1, **RULE}},
    "fixed K/2 = 4": 4,
    "fixed 2K = 16": 16,
}
# Without a target (nor a window: the defaults, 1 s and a tolerance of 2), as a user who sets neither.
UNTARGETED: dict[str, dict[str, Any]] = {
    "adaptive, no target, from 40": {"adaptive": {"min": 2, "max": 64, "initial": 40}},
    "adaptive, no target, from 1": {"adaptive": {"min": 1, "max": 64, "initial": 1}},
}
COLOURS = ("#1f77b4", "#2ca02c", "#ff7f0e", "#d62728")


def run(bench: Bench, seconds: float, svg: str | None = None, processes: int = 4) -> dict[str, Any]:
    runs: dict[str, knee.Run] = {}
    for index, (label, limit) in enumerate({**CASES, **UNTARGETED}.items()):
        options = {"limit": limit, "lease": 10}
        runs[label] = knee.run(
            "benchmarks.settings", bench.prefix, options, KNEE, seconds, processes=processes, name=f"knee-{index}"
        )
    acceptable = KNEE.base * ACCEPTABLE
    cases = {
        label: {
            "settled_limit": r.settled_limit(),
            "goodput_per_s": round(r.goodput(acceptable, last=1.0), 1),
            "served_per_s": round(sum(1 for _, w in r.records if w is not None) / r.seconds, 1),
            "median_work_ms": _median_ms([w for _, w in r.records if w is not None]),
            "over_limit": r.over,
        }
        for label, r in runs.items()
    }
    best_fixed = max(c["goodput_per_s"] for label, c in cases.items() if label.startswith("fixed"))
    worst_adaptive = min(c["goodput_per_s"] for label, c in cases.items() if label in CASES and "adaptive" in label)
    if svg:
        with open(svg, "w") as out:
            out.write(chart({label: r for label, r in runs.items() if label in CASES}))
    return {
        "adaptive_cases": cases,
        "adaptive_knee": KNEE.knee,
        "adaptive_seconds": seconds,
        "adaptive_goodput_ratio_vs_best_fixed": round(worst_adaptive / best_fixed, 2) if best_fixed else None,
        "adaptive_svg": svg,
    }


def _median_ms(seconds: list[float]) -> float | None:
    """The median work time in ms; None when a case served nothing (its workers missed a short run's window)."""
    return round(statistics.median(seconds) * 1000, 1) if seconds else None


def rows(results: dict[str, Any]) -> list[tuple[str, ...]]:
    """The per-case table: label, settled limit, goodput, served, median work, entries over the limit."""
    return [
        (
            label,
            f"{c['settled_limit']:g}",
            f"{c['goodput_per_s']:.0f}",
            f"{c['served_per_s']:.0f}",
            "-" if c["median_work_ms"] is None else f"{c['median_work_ms']:.0f}",
            str(c["over_limit"]),
        )
        for label, c in (results.get("adaptive_cases") or {}).items()
    ]


COLUMNS = ("case", "settled limit", "goodput/s", "served/s", "median work (ms)", "over the limit")

# The chart: two panels sharing the time axis, drawn as plain SVG text (no plotting dependency).
WIDTH, PANEL, MARGIN, GAP = 680, 150, 48, 40
RIGHT = 80  # room for the reference lines' names


def _series(points: list[tuple[float, float]], top: float, seconds: float, y0: float) -> str:
    return " ".join(
        f"{MARGIN + t / seconds * (WIDTH - MARGIN - RIGHT):.1f},{y0 + PANEL - min(v, top) / top * PANEL:.1f}"
        for t, v in points
        if 0 <= t <= seconds
    )


def _buckets(r: knee.Run, size: float = 0.5) -> list[tuple[float, float]]:
    """The median work time (ms) per ``size`` seconds of the run."""
    grouped: dict[int, list[float]] = {}
    for at, work in r.records:
        if work is not None:
            grouped.setdefault(int((at - r.started) / size), []).append(work * 1000)
    return [(b * size + size / 2, statistics.median(v)) for b, v in sorted(grouped.items())]


def chart(runs: dict[str, knee.Run]) -> str:
    seconds = max(r.seconds for r in runs.values())
    limits = {label: [(at - r.started, float(v)) for at, v in r.limits] for label, r in runs.items()}
    works = {label: _buckets(r) for label, r in runs.items()}
    top_limit = max(8.0, *(v for points in limits.values() for _, v in points))
    top_work = max(KNEE.base * 1000 * 3, *(v for points in works.values() for _, v in points))
    height = 2 * PANEL + GAP + 2 * MARGIN
    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{height}" '
        f'viewBox="0 0 {WIDTH} {height}" font-family="sans-serif" font-size="11">',
        f'<rect width="{WIDTH}" height="{height}" fill="white"/>',
    ]
    panels = (("limit in force", limits, top_limit), ("work time, ms (median per 0.5 s)", works, top_work))
    for index, (title, data, top) in enumerate(panels):
        y0 = MARGIN + index * (PANEL + GAP)
        parts.append(f'<text x="{MARGIN}" y="{y0 - 6}" font-weight="bold">{title}</text>')
        parts.append(
            f'<rect x="{MARGIN}" y="{y0}" width="{WIDTH - MARGIN - RIGHT}" height="{PANEL}" fill="none" stroke="#999"/>'
        )
        parts.append(f'<text x="{MARGIN - 4}" y="{y0 + 4}" text-anchor="end">{top:.0f}</text>')
        parts.append(f'<text x="{MARGIN - 4}" y="{y0 + PANEL}" text-anchor="end">0</text>')
        marks = [(KNEE.knee, f"K={KNEE.knee}")] if index == 0 else [(KNEE.base * ACCEPTABLE * 1000, "acceptable")]
        for value, name in marks:
            y = y0 + PANEL - value / top * PANEL
            parts.append(
                f'<line x1="{MARGIN}" x2="{WIDTH - RIGHT}" y1="{y:.1f}" y2="{y:.1f}" stroke="#999" '
                'stroke-dasharray="4 3"/>'
            )
            parts.append(f'<text x="{WIDTH - RIGHT + 4}" y="{y + 4:.1f}">{name}</text>')
        for colour, points in zip(COLOURS, data.values(), strict=False):
            parts.append(
                f'<polyline fill="none" stroke="{colour}" stroke-width="1.5" '
                f'points="{_series(points, top, seconds, y0)}"/>'
            )
    bottom = MARGIN + 2 * PANEL + GAP
    middle = (WIDTH - RIGHT + MARGIN) / 2
    parts.append(
        f'<text x="{middle}" y="{bottom + 16}" text-anchor="middle">seconds of load (0 to {seconds:.0f})</text>'
    )
    for index, (colour, label) in enumerate(zip(COLOURS, runs, strict=False)):
        x = MARGIN + index * (WIDTH - MARGIN - RIGHT) / len(runs)
        parts.append(f'<rect x="{x:.0f}" y="{bottom + 26}" width="10" height="10" fill="{colour}"/>')
        parts.append(f'<text x="{x + 14:.0f}" y="{bottom + 35}">{label}</text>')
    parts.append("</svg>")
    return "\n".join(parts) + "\n"
