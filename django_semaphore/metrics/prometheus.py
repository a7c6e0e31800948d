"""A reading (reading.py) in Prometheus's text exposition format, version 0.0.4.

Written here rather than with ``prometheus_client``: the format is a few
lines of text, and its multi-process mode (a directory of files per worker,
collectors that do not work there) is what this endpoint exists to avoid.
The totals come from Redis, where every process of every host added its
counts (core/tally.py), so one scrape of any worker is the whole site's.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator

from ..core.series import OTHER
from ..core.tally import ACQUIRED, BOUNDS, BUCKETS, DRY_RUN, REASONS, RELEASED, RESULTS
from . import names, room_points
from .names import FREE, USED, prometheus_name
from .reading import SemaphoreReading

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
# Results every semaphore reports from the start, at 0 until they happen: a series that appears at
# its first increment loses that increment to rate().
ALWAYS = ("acquired", "rejected", "timed_out", "cancelled")

Labels = tuple[tuple[str, str], ...]


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def _labels(labels: Labels) -> str:
    return "{" + ",".join(f'{key}="{_escape(value)}"' for key, value in labels) + "}" if labels else ""


def _number(value: float) -> str:
    if value == int(value) and abs(value) < 1e15:
        return str(int(value))
    return repr(float(value))


def _le(bound: float) -> str:
    return repr(float(bound))


def _family(name: str, kind: str, help_text: str, samples: Iterable[tuple[str, Labels, float]]) -> Iterator[str]:
    listed = list(samples)
    if not listed:
        return
    yield f"# HELP {name} {help_text}"
    yield f"# TYPE {name} {kind}"
    for sample, labels, value in listed:
        yield f"{sample}{_labels(labels)} {_number(value)}"


def _gauge(instrument: tuple[str, str, str], samples: Iterable[tuple[Labels, float]]) -> Iterator[str]:
    name = prometheus_name(instrument[0], instrument[1])
    return _family(name, "gauge", instrument[2], ((name, labels, value) for labels, value in samples))


def _counter(instrument: tuple[str, str, str], samples: Iterable[tuple[Labels, float]]) -> Iterator[str]:
    name = prometheus_name(instrument[0], instrument[1]) + "_total"
    return _family(name, "counter", instrument[2], ((name, labels, value) for labels, value in samples))


def _histogram(instrument: tuple[str, str, str], series: Iterable[tuple[Labels, list[int]]]) -> Iterator[str]:
    """Cumulative buckets, the sum (seconds) and the count of rows laid out as core/tally.py keeps them."""
    name = prometheus_name(instrument[0], instrument[1])
    samples = []
    for labels, row in series:
        running = 0
        for index in range(BUCKETS):
            running += row[index]
            le = "+Inf" if index == len(BOUNDS) else _le(BOUNDS[index])
            samples.append((f"{name}_bucket", (*labels, ("le", le)), float(running)))
        samples.append((f"{name}_sum", labels, row[BUCKETS] / 1_000_000))
        samples.append((f"{name}_count", labels, float(running)))
    return _family(name, "histogram", instrument[2], samples)


def _attempt_labels(name: str, result: str, detail: str) -> Labels:
    labels: Labels = (("name", name), ("result", result))
    if detail == DRY_RUN:
        return (*labels, ("dry_run", "true"))
    if detail:
        error_type, _, policy = detail.partition("/")
        labels = (*labels, ("error_type", error_type))
        return (*labels, ("on_error", policy)) if policy else labels
    return labels


def _added(rows: Iterable[list[int]], width: int) -> list[int]:
    total = [0] * width
    for row in rows:
        for index, value in enumerate(row[:width]):
            total[index] += value
    return total


def render(readings: list[SemaphoreReading]) -> str:
    """The exposition of every reading, families in a fixed order, each once."""
    lines: list[str] = []
    lines += _gauge(names.USAGE, _usage(readings))
    lines += _gauge(names.LIMIT, ((_own(r, ("mode", r.mode)), r.limit) for r in readings))
    lines += _gauge(names.WAITERS, _waiters(readings))
    lines += _gauge(names.PARTITIONS, ((_own(r), r.partitions) for r in readings if r.partitions is not None))
    lines += _counter(names.ATTEMPTS, _attempts(readings))
    lines += _histogram(names.ACQUIRE_DURATION, _durations(readings))
    lines += _histogram(names.HOLD_DURATION, _holds(readings))
    lines += _counter(names.LOST, _lost(readings))
    lines += _gauge(names.ADAPTIVE_HOLD, ((_own(r), r.hold_s) for r in readings if r.hold_s is not None))
    lines += _gauge(names.ADAPTIVE_TARGET, ((_own(r), r.target_s) for r in readings if r.target_s is not None))
    for instrument, points in room_points.GAUGES:
        lines += _gauge(instrument, ((_labelled(attrs), value) for value, attrs in points(readings)))
    for instrument, points in room_points.COUNTERS:
        lines += _counter(instrument, ((_labelled(attrs), value) for value, attrs in points(readings)))
    return "\n".join(lines) + "\n"


def _labelled(attributes: dict[str, object]) -> Labels:
    """OpenTelemetry attributes as the endpoint's labels (names.LABELS)."""
    return tuple((names.LABELS[key], str(value)) for key, value in attributes.items())


def _own(reading: SemaphoreReading, *more: tuple[str, str]) -> Labels:
    return (("name", reading.name), *more)


def _usage(readings: list[SemaphoreReading]) -> Iterator[tuple[Labels, float]]:
    for r in readings:
        if r.used is not None:
            yield _own(r, ("state", USED)), r.used
            yield _own(r, ("state", FREE)), max(r.limit - r.used, 0)
        if r.keyed is not None:
            for part in r.keyed.parts:
                yield _own(r, ("key", part.key), ("state", USED)), part.used
                yield _own(r, ("key", part.key), ("state", FREE)), max(part.limit - part.used, 0)
            # The partitions without a place: their permits in use; their free ones would add up to nothing useful.
            yield _own(r, ("key", OTHER), ("state", USED)), r.keyed.others.used


def _waiters(readings: list[SemaphoreReading]) -> Iterator[tuple[Labels, float]]:
    for r in readings:
        if r.waiting is not None:
            yield _own(r), r.waiting
        if r.keyed is not None:
            for part in r.keyed.parts:
                yield _own(r, ("key", part.key)), part.waiting
            yield _own(r, ("key", OTHER)), r.keyed.others.waiting


def _attempts(readings: list[SemaphoreReading]) -> Iterator[tuple[Labels, float]]:
    for r in readings:
        seen = {(result, detail): sum(row[:BUCKETS]) for (result, detail), row in r.totals.attempts.items()}
        for result in ALWAYS:
            seen.setdefault((result, ""), 0)
        for result, detail in sorted(seen, key=lambda k: (RESULTS.index(k[0]), k[1])):
            yield _attempt_labels(r.name, result, detail), seen[(result, detail)]


def _durations(readings: list[SemaphoreReading]) -> Iterator[tuple[Labels, list[int]]]:
    for r in readings:
        for result in RESULTS:
            rows = [row for (kind, _detail), row in r.totals.attempts.items() if kind == result]
            if rows or result == ACQUIRED:  # the admitted's waits are there from the start, as ALWAYS's counts
                yield (("name", r.name), ("result", result)), _added(rows, BUCKETS + 1)


def _holds(readings: list[SemaphoreReading]) -> Iterator[tuple[Labels, list[int]]]:
    for r in readings:
        for reason in REASONS:
            row = r.totals.holds.get(reason)
            if row is not None or reason == RELEASED:
                yield (("name", r.name), ("reason", reason)), row or [0] * (BUCKETS + 2)


def _lost(readings: list[SemaphoreReading]) -> Iterator[tuple[Labels, float]]:
    for r in readings:
        for reason in REASONS:
            if reason != RELEASED:
                row = r.totals.holds.get(reason)
                yield (("name", r.name), ("reason", reason)), row[BUCKETS + 1] if row else 0
