"""What this process counts of its own acquires and permits: the per-call part of the metrics.

Each acquire that ends and each permit that ends is one call here (from
core/semaphore.py and core/permit.py): a bucket found by bisection and a few
integer additions in this process's memory, under a lock. Nothing is sent to
Redis on the way: the background thread (core/renewal.py) writes what was
counted once per ``SEMAPHORE_METRICS_FLUSH_INTERVAL``, one script per
semaphore that had activity (lua/tally.lua), so the counts of every process of
every host add up in Redis, where the metrics face (django_semaphore/metrics/)
and the dashboard read them. Listeners (the OpenTelemetry instruments, when the
API is installed) hear each call as it ends.

A flush that Redis does not answer keeps its counts for the next one: an
outage's errors are counted here, per process, and reach Redis when it
answers again. That next flush is not tried on a timer (a process refused by
its ACL would call Redis once per interval for as long as it lives, with no
traffic): it comes one interval after the next call counted, or as soon as
a call of the process finds Redis answering after an outage. A flush never
loads the library (``load=False``): one an operator removed is loaded again
by the next call that needs it, never by the metrics; the counts wait for it.
A flush whose reply is lost is sent again and may count twice; a process
killed outright loses what it counted since its last flush (at most one
interval). A forked child starts from nothing, so a pre-forking server's
workers never count their parent's calls twice.
"""

from __future__ import annotations

import atexit
import logging
import os
import threading
import time
from bisect import bisect_left
from collections.abc import Iterable
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any, Protocol, TypeVar

from django.core.signals import setting_changed

from . import scripts
from .bounded import collect_posted
from .calls import ScriptCall
from .clients import SyncClient
from .conf import app_setting, key_prefix
from .connection import get_client
from .errors import BackendUnavailable, WeightAboveLimit, is_outage
from .redis_keys import SemaphoreKeys

logger = logging.getLogger("django_semaphore.metrics")

# Upper bounds (seconds) of the duration buckets, for waits and holds alike: the acquire of a free
# permit takes a round trip (under a millisecond on a LAN), a request holds one for milliseconds to
# minutes. The histograms of the metrics, the dashboard's percentiles and the OpenTelemetry advice
# all use these. The last bucket, above every bound, is +Inf.
BOUNDS: tuple[float, ...] = (
    0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 300.0,
)  # fmt: skip
BUCKETS = len(BOUNDS) + 1

# How an acquire ended (``django_semaphore.acquire.result``).
ACQUIRED, REJECTED, TIMED_OUT, CANCELLED, ERROR = "acquired", "rejected", "timed_out", "cancelled", "error"
RESULTS = (ACQUIRED, REJECTED, TIMED_OUT, CANCELLED, ERROR)
# How a permit ended (``django_semaphore.release.reason``); all but the first are losses.
RELEASED, EXPIRED, REVOKED, MAX_HOLD = "released", "expired", "revoked", "max_hold"
REASONS = (RELEASED, EXPIRED, REVOKED, MAX_HOLD)
# An attempt's detail, beside its result: a dry run's refusal, or an error's type and the policy applied.
DRY_RUN = "dry_run"
# True while the request path runs a dry-run rule's acquire (web/admission.py): its refusal is one.
in_dry_run: ContextVar[bool] = ContextVar("django_semaphore_dry_run", default=False)
# True while the deploy check probes the engine (ops/redis_check.py): its throw-away semaphore is not the
# site's, so its calls reach neither the metrics' counts (a hash per name that never expires) nor listeners.
uncounted: ContextVar[bool] = ContextVar("django_semaphore_uncounted", default=False)

# The recent activity the dashboard reads: counts per SLOT_MS slot of the server's clock, kept for an
# hour (its charts' span), and duration buckets kept for the last minute and a slot (its percentiles).
SLOT_MS = 10_000
COUNT_SLOTS = 360
BUCKET_SLOTS = 8

# A row of an attempt series: BUCKETS counts, then the sum of the durations in microseconds. A hold
# series adds the permits (weights) it counts.
_SUM = BUCKETS
_PERMITS = BUCKETS + 1

Key = TypeVar("Key")


class Listener(Protocol):
    """Who hears every attempt and permit as it ends (django_semaphore/metrics/otel.py)."""

    def attempt(self, name: str, result: str, seconds: float, detail: str) -> None: ...

    def permit(self, name: str, reason: str, seconds: float, weight: int) -> None: ...


def tally_key(name: str) -> str:
    """A semaphore's totals since they were first written: HASH field -> count (lua/tally.lua)."""
    return SemaphoreKeys.tally_of(key_prefix(), name)


def recent_key(name: str) -> str:
    """A semaphore's recent activity: HASH "<slot>|<field>" -> count in that slot (lua/tally.lua)."""
    return SemaphoreKeys.recent_of(key_prefix(), name)


def error_detail(error: BaseException, on_error: str) -> str:
    """An error's detail: the class of what failed (Redis's own error behind ``BackendUnavailable``), and the policy.

    ``BackendUnavailable`` is what the engine raises for every outage; the
    cause behind it (``TimeoutError``, ``ConnectionError``, ``ResponseError``
    for a refusal such as OOM) is what tells outages apart. Only an outage has
    a policy: guards apply ``on_error`` to it.
    """
    if isinstance(error, BackendUnavailable):
        cause = error.__cause__
        return f"{type(cause if cause is not None else error).__name__}/{on_error}"
    return f"{type(error).__name__}/"


class Tally:
    """This process's counts, written to Redis in batches (see the module's docstring)."""

    def __init__(self) -> None:
        self.listeners: list[Listener] = []
        self._reset()
        # A forked child (gunicorn --preload, Celery prefork) counts its own calls only.
        os.register_at_fork(after_in_child=self._reset)
        atexit.register(self._at_exit)

    def _at_exit(self) -> None:
        """The last counts: with those the answers of releases sent without waiting (core/bounded.py) still carry."""
        collect_posted()
        self.flush()

    def _reset(self) -> None:
        self._lock = threading.Lock()
        self._attempts: dict[tuple[str, str, str], list[int]] = {}
        self._holds: dict[tuple[str, str], list[int]] = {}
        self._scheduled = False
        self._interval: float | bool | None = False  # False: not read from settings yet

    # -- the calls that end ----------------------------------------------------------------------

    def attempt(self, name: str, result: str, seconds: float, detail: str = "") -> None:
        """One acquire ended with ``result`` after ``seconds``."""
        if uncounted.get():
            return
        for listener in self.listeners:
            listener.attempt(name, result, seconds, detail)
        if self.counting:
            self._count(self._attempts, (name, result, detail), BUCKETS + 1, seconds)

    def permit(self, name: str, reason: str, seconds: float, weight: int) -> None:
        """One permit of ``weight`` ended for ``reason`` after being held ``seconds``."""
        if uncounted.get():
            return
        for listener in self.listeners:
            listener.permit(name, reason, seconds, weight)
        if self.counting:
            self._count(self._holds, (name, reason), BUCKETS + 2, seconds, weight)

    def _count(self, rows: dict[Key, list[int]], key: Key, width: int, seconds: float, permits: int = 0) -> None:
        """One call of ``seconds`` in ``key``'s row of ``rows`` (``width`` wide when new), and its ``permits``.

        The attempts and the holds count alike, one bucket and the sum; a hold
        row adds the permits (an attempt row has no such column: it passes 0).
        """
        index = bisect_left(BOUNDS, seconds)
        with self._lock:
            row = rows.get(key)
            if row is None:
                row = rows[key] = [0] * width
            row[index] += 1
            row[_SUM] += int(seconds * 1_000_000)
            if permits:
                row[_PERMITS] += permits
        if not self._scheduled:
            self._schedule()

    # -- what the engine calls --------------------------------------------------------------------

    def ended(self, name: str, granted: bool, waited: bool, cancelled: bool, started: float) -> None:
        """An attempt that answered, begun at ``started`` (monotonic): granted, or turned away.

        Turned away: ``cancelled`` (its cancel event was set), ``waited`` (it
        waited in line and its wait ran out: timed out) or at once (rejected:
        full with no wait, or paused; a dry run's refusal says so).
        """
        seconds = time.monotonic() - started
        if granted:
            self.attempt(name, ACQUIRED, seconds)
        elif cancelled:
            self.attempt(name, CANCELLED, seconds)
        elif waited:
            self.attempt(name, TIMED_OUT, seconds)
        else:
            self.attempt(name, REJECTED, seconds, DRY_RUN if in_dry_run.get() else "")

    def failed(self, name: str, on_error: str, error: BaseException, started: float) -> None:
        """An attempt that raised ``error``: an outage or a caller's bug (error), a cancelled wait, a weight too high.

        A weight above the limit in force is a refusal (guards answer it as
        full); a cancelled task, or an interrupted thread, a cancellation.
        """
        seconds = time.monotonic() - started
        if isinstance(error, WeightAboveLimit):
            self.attempt(name, REJECTED, seconds)
        elif not isinstance(error, Exception):  # asyncio.CancelledError, KeyboardInterrupt, SystemExit
            self.attempt(name, CANCELLED, seconds)
        else:
            self.attempt(name, ERROR, seconds, error_detail(error, on_error))

    # -- the batches ---------------------------------------------------------------------------------

    @property
    def counting(self) -> bool:
        """Whether counts are kept for Redis (``SEMAPHORE_METRICS_FLUSH_INTERVAL`` is not None)."""
        interval = self._interval
        if interval is False:
            interval = self._interval = _interval_setting()
        return interval is not None

    def _schedule(self) -> None:
        from .renewal import renewer  # renewal.py's thread runs the flush; it imports nothing of this module

        with self._lock:
            if self._scheduled:
                return
            self._scheduled = True
        interval = self._interval if isinstance(self._interval, float) else _interval_setting()
        renewer.run_at("metrics", time.monotonic() + (interval or 0.0), self.flush)

    def flush(self) -> None:
        """Write what was counted since the last flush to Redis, one script per semaphore, one round trip.

        Counts Redis did not take stay for the next flush (scheduled again).
        """
        with self._lock:
            attempts, holds = self._attempts, self._holds
            self._attempts, self._holds = {}, {}
            self._scheduled = False
        if not attempts and not holds:
            return
        names = sorted({key[0] for key in attempts} | {key[0] for key in holds})
        try:
            calls = [_flush_call(name, attempts, holds) for name in names]
            replies = scripts.run_pipeline(get_client(), calls, load=False)
        except Exception as exc:
            if not is_outage(exc):
                logger.exception("Writing the metrics' counts to Redis failed")
            replies = [exc] * len(names)
        failed = {name for name, reply in zip(names, replies, strict=True) if isinstance(reply, Exception)}
        if failed:
            self._keep(
                {k: v for k, v in attempts.items() if k[0] in failed},
                {k: v for k, v in holds.items() if k[0] in failed},
            )

    def _keep(self, attempts: dict[tuple[str, str, str], list[int]], holds: dict[tuple[str, str], list[int]]) -> None:
        """Counts a flush could not write, added back for the next one (see the module's docstring for when)."""
        from .renewal import renewer

        with self._lock:
            _merge(self._attempts, attempts)
            _merge(self._holds, holds)
        renewer.after_outage("metrics", self._schedule)

    def pending(self) -> dict[str, Any]:
        """What this process counted and has not written yet (for tests and the benchmarks)."""
        with self._lock:
            return {"attempts": dict(self._attempts), "holds": dict(self._holds)}

    def settings_changed(self, **kwargs: Any) -> None:
        """Read the interval again; counts made under another prefix or server are theirs, not the new one's.

        A site's settings do not change while it runs: this is
        ``override_settings`` (tests), which must not carry one test's counts
        into the next one's keys.
        """
        setting = kwargs.get("setting")
        if setting == "SEMAPHORE_METRICS_FLUSH_INTERVAL":
            self._interval = False
        elif setting in ("SEMAPHORE_KEY_PREFIX", "SEMAPHORE_CONNECTION"):
            with self._lock:
                self._attempts, self._holds = {}, {}


def _merge(into: dict[Key, list[int]], rows: dict[Key, list[int]]) -> None:
    for key, row in rows.items():
        mine = into.get(key)
        if mine is None:
            into[key] = row
        else:
            for index, value in enumerate(row):
                mine[index] += value


def _interval_setting() -> float | None:
    value = app_setting("SEMAPHORE_METRICS_FLUSH_INTERVAL")
    return None if value is None else float(value)


def _pairs(fields: dict[str, int]) -> list[Any]:
    return [item for field, count in fields.items() if count for item in (field, count)]


def _add(fields: dict[str, int], field: str, count: int) -> None:
    if count:
        fields[field] = fields.get(field, 0) + count


def _flush_call(
    name: str, attempts: dict[tuple[str, str, str], list[int]], holds: dict[tuple[str, str], list[int]]
) -> ScriptCall:
    """lua/tally.lua's call for one semaphore: its totals' increments, then its recent slot's."""
    totals: dict[str, int] = {}
    recent: dict[str, int] = {}
    for (owner, result, detail), row in attempts.items():
        if owner != name:
            continue
        for index in range(BUCKETS):
            _add(totals, f"a|{result}|{detail}|{index}", row[index])
        _add(totals, f"a|{result}|{detail}|s", row[_SUM])
        _add(recent, f"c{RESULTS.index(result)}", sum(row[:BUCKETS]))
        if result == ACQUIRED:
            for index in range(BUCKETS):
                _add(recent, f"w{index}", row[index])
    for (owner, reason), row in holds.items():
        if owner != name:
            continue
        for index in range(BUCKETS):
            _add(totals, f"h|{reason}|{index}", row[index])
            _add(recent, f"h{index}", row[index])
        _add(totals, f"h|{reason}|s", row[_SUM])
        _add(totals, f"h|{reason}|p", row[_PERMITS])
    head = [SLOT_MS, COUNT_SLOTS, BUCKET_SLOTS, len(RESULTS), BUCKETS, len(totals)]
    return ScriptCall("tally", [tally_key(name), recent_key(name)], [*head, *_pairs(totals), *_pairs(recent)])


@dataclass(frozen=True)
class Totals:
    """A semaphore's totals as every process wrote them (lua/tally.lua), read back.

    ``attempts``: (result, detail) -> bucket counts then the summed
    microseconds; ``holds``: reason -> the same, then the permits counted.
    ``since_ms``: when the first flush wrote them (server clock), None before.
    """

    since_ms: int | None
    attempts: dict[tuple[str, str], list[int]]
    holds: dict[str, list[int]]

    def count(self, result: str) -> int:
        return sum(sum(row[:BUCKETS]) for (kind, _detail), row in self.attempts.items() if kind == result)

    def ended(self, reason: str) -> int:
        """The permits (holds, whatever their weight) that ended for ``reason``."""
        row = self.holds.get(reason)
        return sum(row[:BUCKETS]) if row else 0


def read_totals(client: SyncClient, names: list[str]) -> dict[str, Totals]:
    """The totals of ``names``, one round trip (a pipeline of HGETALL, each in its name's slot)."""
    pipe = client.pipeline(transaction=False)
    for name in names:
        pipe.hgetall(tally_key(name))
    found: dict[str, Totals] = {}
    for name, raw in zip(names, pipe.execute(), strict=True):
        fields = [(_text(k), _text(v)) for k, v in raw.items()]
        since = next((v for k, v in fields if k == "since"), None)
        attempts, holds = rows_of(fields)
        found[name] = Totals(int(since) if since and since.isdigit() else None, attempts, holds)
    return found


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def rows_of(fields: Iterable[tuple[str, str]]) -> tuple[dict[tuple[str, str], list[int]], dict[str, list[int]]]:
    """A totals hash (lua/tally.lua) read back: attempt rows by (result, detail), hold rows by reason."""
    attempts: dict[tuple[str, str], list[int]] = {}
    holds: dict[str, list[int]] = {}
    for field, value in fields:
        parts = field.split("|")
        try:
            count = int(value)
        except ValueError:
            continue
        if parts[0] == "a" and len(parts) == 4 and parts[1] in RESULTS:
            row = attempts.setdefault((parts[1], parts[2]), [0] * (BUCKETS + 1))
        elif parts[0] == "h" and len(parts) == 3 and parts[1] in REASONS:
            row = holds.setdefault(parts[1], [0] * (BUCKETS + 2))
        else:
            continue
        slot = {"s": _SUM, "p": _PERMITS}.get(parts[-1])
        if slot is None:
            if not parts[-1].isdigit() or int(parts[-1]) >= BUCKETS:
                continue
            slot = int(parts[-1])
        if slot < len(row):
            row[slot] += count
    return attempts, holds


tally = Tally()
setting_changed.connect(tally.settings_changed, dispatch_uid="django_semaphore.tally")
