"""The OpenTelemetry instruments, on the API only (the ``otel`` extra: ``opentelemetry-api``).

``install()`` runs when the app is ready (apps.py): with the API importable it
gets the meter ``django_semaphore`` (the package's version) from the global
MeterProvider and makes the instruments; whatever provider the site sets,
before or after, receives them (the API's proxies hand over to it), and
without an SDK they cost a method call that does nothing. There is no
setting.

The synchronous instruments hear each attempt and permit as it ends, as a
listener of core/tally.py. The observable ones read Redis when the reader
collects (reading.py), once per collection for all of them: every process
reports the same site-wide values, so a dashboard takes ``max`` across
instances, not ``sum``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

from ..core import __version__
from ..core.series import OTHER
from ..core.tally import BOUNDS, DRY_RUN, RELEASED, tally
from . import names, room_points
from .names import FREE, USED
from .reading import Cached, SemaphoreReading

Attributes = dict[str, Any]


class Instruments:
    """The synchronous instruments, fed by core/tally.py; attribute sets made once per combination."""

    def __init__(self, meter: Any) -> None:
        self.attempts = meter.create_counter(names.ATTEMPTS[0], unit=names.ATTEMPTS[1], description=names.ATTEMPTS[2])
        self.lost = meter.create_counter(names.LOST[0], unit=names.LOST[1], description=names.LOST[2])
        self.acquire_duration = _histogram(meter, names.ACQUIRE_DURATION)
        self.hold_duration = _histogram(meter, names.HOLD_DURATION)
        self._attempt_attributes: dict[tuple[str, str, str], tuple[Attributes, Attributes]] = {}
        self._hold_attributes: dict[tuple[str, str], Attributes] = {}

    def attempt(self, name: str, result: str, seconds: float, detail: str) -> None:
        found = self._attempt_attributes.get((name, result, detail))
        if found is None:
            found = self._attempt_attributes[(name, result, detail)] = _attempt_attributes(name, result, detail)
        self.attempts.add(1, found[0])
        self.acquire_duration.record(seconds, found[1])

    def permit(self, name: str, reason: str, seconds: float, weight: int) -> None:
        attributes = self._hold_attributes.get((name, reason))
        if attributes is None:
            attributes = self._hold_attributes[(name, reason)] = {names.NAME: name, names.REASON: reason}
        self.hold_duration.record(seconds, attributes)
        if reason != RELEASED:
            self.lost.add(weight, attributes)


def _histogram(meter: Any, instrument: tuple[str, str, str]) -> Any:
    name, unit, description = instrument
    try:
        return meter.create_histogram(
            name, unit=unit, description=description, explicit_bucket_boundaries_advisory=BOUNDS
        )
    except TypeError:  # an API before 1.23 takes no advice: the SDK's default buckets then
        return meter.create_histogram(name, unit=unit, description=description)


def _attempt_attributes(name: str, result: str, detail: str) -> tuple[Attributes, Attributes]:
    """The counter's attributes (the error's type and policy, a dry run) and the histogram's (the result only)."""
    counted: Attributes = {names.NAME: name, names.RESULT: result}
    timed = dict(counted)
    if detail == DRY_RUN:
        counted[names.DRY_RUN] = True
    elif detail:
        error_type, _, policy = detail.partition("/")
        counted[names.ERROR_TYPE] = error_type
        if policy:
            counted[names.ON_ERROR] = policy
    return counted, timed


class Observed:
    """The observable instruments' callbacks, on one cached reading per collection."""

    def __init__(self, cached: Cached) -> None:
        self.cached = cached

    def _observations(self, points: Iterator[tuple[float, Attributes]]) -> list[Any]:
        from opentelemetry.metrics import Observation

        return [Observation(value, attributes) for value, attributes in points]

    def usage(self, options: Any) -> list[Any]:
        return self._observations(_usage(self.cached.get()))

    def limit(self, options: Any) -> list[Any]:
        return self._observations((r.limit, {names.NAME: r.name, names.MODE: r.mode}) for r in self.cached.get())

    def waiters(self, options: Any) -> list[Any]:
        return self._observations(_waiters(self.cached.get()))

    def partitions(self, options: Any) -> list[Any]:
        readings = self.cached.get()
        return self._observations((r.partitions, {names.NAME: r.name}) for r in readings if r.partitions is not None)

    def hold_time(self, options: Any) -> list[Any]:
        readings = self.cached.get()
        return self._observations((r.hold_s, {names.NAME: r.name}) for r in readings if r.hold_s is not None)

    def room(
        self, points: Callable[[list[SemaphoreReading]], Iterator[tuple[float, Attributes]]]
    ) -> Callable[..., Any]:
        """The callback of one of the room family's instruments (room_points.py)."""
        return lambda options: self._observations(points(self.cached.get()))

    def target(self, options: Any) -> list[Any]:
        readings = self.cached.get()
        return self._observations((r.target_s, {names.NAME: r.name}) for r in readings if r.target_s is not None)


def _usage(readings: list[SemaphoreReading]) -> Iterator[tuple[float, Attributes]]:
    for r in readings:
        if r.used is not None:
            yield r.used, {names.NAME: r.name, names.STATE: USED}
            yield max(r.limit - r.used, 0), {names.NAME: r.name, names.STATE: FREE}
        if r.keyed is not None:
            for part in r.keyed.parts:
                yield part.used, {names.NAME: r.name, names.KEY: part.key, names.STATE: USED}
                yield max(part.limit - part.used, 0), {names.NAME: r.name, names.KEY: part.key, names.STATE: FREE}
            yield r.keyed.others.used, {names.NAME: r.name, names.KEY: OTHER, names.STATE: USED}


def _waiters(readings: list[SemaphoreReading]) -> Iterator[tuple[float, Attributes]]:
    for r in readings:
        if r.waiting is not None:
            yield r.waiting, {names.NAME: r.name}
        if r.keyed is not None:
            for part in r.keyed.parts:
                yield part.waiting, {names.NAME: r.name, names.KEY: part.key}
            yield r.keyed.others.waiting, {names.NAME: r.name, names.KEY: OTHER}


_installed: Instruments | None = None


def install(meter_provider: Any = None, *, again: bool = False) -> Instruments | None:
    """Make the instruments once; None without the API.

    Tests make them again, on ``meter_provider`` (an SDK's, with an
    in-memory reader), then ``again`` on the global provider.
    """
    global _installed
    try:
        from opentelemetry import metrics
    except ImportError:
        return None
    if _installed is not None:
        if meter_provider is None and not again:
            return _installed
        tally.listeners.remove(_installed)
    meter = metrics.get_meter(names.METER, __version__, meter_provider=meter_provider)
    instruments = Instruments(meter)
    observed = Observed(Cached())
    for (name, unit, description), callback in (
        (names.USAGE, observed.usage),
        (names.LIMIT, observed.limit),
        (names.WAITERS, observed.waiters),
        (names.PARTITIONS, observed.partitions),
    ):
        meter.create_observable_up_down_counter(name, callbacks=[callback], unit=unit, description=description)
    for (name, unit, description), callback in (
        (names.ADAPTIVE_HOLD, observed.hold_time),
        (names.ADAPTIVE_TARGET, observed.target),
    ):
        meter.create_observable_gauge(name, callbacks=[callback], unit=unit, description=description)
    for (name, unit, description), points in room_points.GAUGES:
        meter.create_observable_gauge(name, callbacks=[observed.room(points)], unit=unit, description=description)
    for (name, unit, description), points in room_points.COUNTERS:
        meter.create_observable_counter(name, callbacks=[observed.room(points)], unit=unit, description=description)
    tally.listeners.append(instruments)
    _installed = instruments
    return instruments
