"""A waiting room's figures as metric points: the room family (names.py), for both exports alike.

People, not requests: visitors in line and inside, the rate the line moves
at (the one estimated waits divide by), the longest wait shown, how long the
line has stood, the time in line and inside by quantile, and the places
abandoned and refused. Each point is a value and its attributes (OpenTelemetry's
keys; the Prometheus endpoint turns them into labels).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from . import names
from .reading import SemaphoreReading

Point = tuple[float, dict[str, Any]]
QUANTILES = (0.5, 0.95)


def _rooms(readings: list[SemaphoreReading]) -> Iterator[SemaphoreReading]:
    return (r for r in readings if r.room is not None)


def visitors(readings: list[SemaphoreReading]) -> Iterator[Point]:
    for r in _rooms(readings):
        assert r.room is not None
        yield r.room.used, {names.NAME: r.name, names.ROOM_STATE: names.INSIDE}
        yield r.room.waiting, {names.NAME: r.name, names.ROOM_STATE: names.WAITING}


def rate(readings: list[SemaphoreReading]) -> Iterator[Point]:
    for r in _rooms(readings):
        assert r.room is not None
        yield r.room.per_second or 0.0, {names.NAME: r.name}


def wait(readings: list[SemaphoreReading]) -> Iterator[Point]:
    for r in _rooms(readings):
        assert r.room is not None
        eta = r.room.eta_seconds(r.room.waiting - 1, r.refresh_s) if r.room.waiting else None
        if eta is not None:
            yield eta, {names.NAME: r.name}


def full(readings: list[SemaphoreReading]) -> Iterator[Point]:
    for r in _rooms(readings):
        assert r.room is not None
        since = r.room.full_since_ms
        yield (max(r.room.now_ms - since, 0) / 1000 if since else 0.0), {names.NAME: r.name}


def times(readings: list[SemaphoreReading]) -> Iterator[Point]:
    for r in _rooms(readings):
        assert r.room is not None
        for stage, counts in ((names.LINE, r.room.time_in_line), (names.INSIDE, r.room.time_inside)):
            for quantile in QUANTILES:
                value = r.room.time_percentile(counts, quantile)
                if value is not None:
                    yield value, {names.NAME: r.name, names.ROOM_STAGE: stage, names.QUANTILE: str(quantile)}


def abandoned(readings: list[SemaphoreReading]) -> Iterator[Point]:
    for r in _rooms(readings):
        assert r.room is not None
        yield r.room.abandoned, {names.NAME: r.name}


def turned_away(readings: list[SemaphoreReading]) -> Iterator[Point]:
    for r in _rooms(readings):
        assert r.room is not None
        yield r.room.turned_away, {names.NAME: r.name}


GAUGES = (
    (names.ROOM_VISITORS, visitors),
    (names.ROOM_RATE, rate),
    (names.ROOM_WAIT, wait),
    (names.ROOM_FULL, full),
    (names.ROOM_TIME, times),
)
COUNTERS = ((names.ROOM_ABANDONED, abandoned), (names.ROOM_TURNED_AWAY, turned_away))
