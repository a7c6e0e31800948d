"""What the metrics read from Redis at scrape or collection time: one reading of every declared semaphore.

Every process reads the same site-wide values, so one scrape of any worker
of any host gives the truth, and a dashboard takes ``max`` across instances,
never ``sum``. The cost is bounded whatever the site's size: one round trip
for the whole semaphores' states (a pipeline of status scripts), one for
the counts every process wrote (core/tally.py), one for the keyed
semaphores' partition counts (and their places, below), and, with
``SEMAPHORE_METRICS_PARTITIONS``, a few per keyed semaphore for a bounded
number of its partitions and one for all their places (partitions.py).
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass
from typing import Any

from redis.exceptions import RedisError

from ..core import scripts, series, stripe_status, vanished, visits
from ..core.adaptive import state_float, state_int
from ..core.conf import declared, key_prefix
from ..core.connection import get_client
from ..core.errors import BackendUnavailable, is_outage, reason
from ..core.redis_keys import SemaphoreKeys
from ..core.replies import SemaphoreStatus
from ..core.semaphore import Semaphore, get_semaphore
from ..core.tally import Totals, read_totals
from ..core.visits import RoomReply
from .conf import metrics_setting
from .names import ADAPTIVE, STATIC
from .partitions import Partitions, read_partitions

# Fields of an adaptive semaphore's state hash its gauges read (core/lua/common.lua): the current
# window's summed and counted holds (ms), and the best window's average.
WINDOW_FIELDS = ("wsum", "wn", "best")


@dataclass(frozen=True)
class SemaphoreReading:
    """One declared semaphore, as every process sees it now."""

    name: str
    mode: str
    limit: int
    totals: Totals
    # A whole semaphore's use and line; None for a keyed one (its partitions have their own).
    used: int | None = None
    waiting: int | None = None
    # A keyed semaphore's partitions in its registry, and, with SEMAPHORE_METRICS_PARTITIONS, those with a
    # place under their keys and the rest summed (partitions.py); None without.
    partitions: int | None = None
    keyed: Partitions | None = None
    # An adaptive limit's current window average and the bound it is compared with (seconds).
    hold_s: float | None = None
    target_s: float | None = None
    # A waiting room's figures (room.lua's, as core/visits.py reads them) and its refresh; None for any other.
    room: RoomReply | None = None
    refresh_s: float = 0.0


def read() -> list[SemaphoreReading]:
    """Every declared semaphore, read now (raises ``BackendUnavailable`` when Redis does not answer)."""
    names = list(declared())
    sems = [get_semaphore(name) for name in names]
    whole = [sem for sem in sems if sem.config.key is None]
    keyed = [sem for sem in sems if sem.config.key is not None]
    per_partition = bool(metrics_setting("SEMAPHORE_METRICS_PARTITIONS"))
    try:
        client = get_client()
        statuses = _statuses(client, whole)
        rooms = _rooms(client, [sem for sem in whole if sem.config.room is not None])
        windows = _windows(client, [sem for sem in whole if sem.config.adaptive is not None])
        counts, placed = _partition_counts(client, keyed, per_partition)
        totals = read_totals(client, names)
        parts = read_partitions(client, keyed, placed) if per_partition else {}
    except RedisError as exc:
        if not is_outage(exc):
            raise
        raise BackendUnavailable(f"Redis unavailable for the metrics: {reason(exc)}") from exc
    readings = []
    for sem in sems:
        mode = ADAPTIVE if sem.config.adaptive is not None else STATIC
        if sem.config.key is None:
            status = statuses[sem.name]
            hold, target = _adaptive(sem, windows.get(sem.name))
            reading = SemaphoreReading(
                sem.name,
                mode,
                status.limit,
                totals[sem.name],
                status.used,
                status.waiting,
                hold_s=hold,
                target_s=target,
                room=rooms.get(sem.name),
                refresh_s=sem.config.room.refresh if sem.config.room else 0.0,
            )
        else:
            reading = SemaphoreReading(
                sem.name,
                mode,
                sem.config.limit,
                totals[sem.name],
                partitions=counts[sem.name],
                keyed=parts.get(sem.name),
            )
        readings.append(reading)
    return readings


def _statuses(client: Any, sems: list[Semaphore]) -> dict[str, SemaphoreStatus]:
    """Each whole semaphore's status script (each stripe's, for a striped one), no holders listed, in one round trip.

    A striped semaphore's figures are its stripes' added up: its limit in
    force, its use and its line are the sums (core/stripe_status.py).
    """
    calls = [calls for sem in sems for calls in sem.stripe_calls or (sem.calls,)]
    replies = iter(scripts.run_pipeline(client, [each.status(0, False) for each in calls]))
    found = {}
    for sem in sems:
        parts = []
        for stripe in range(len(sem.stripe_calls) or 1):
            reply = next(replies)
            if isinstance(reply, Exception):
                raise reply
            vanished.report_status(sem.name, None, reply)
            configured = sem.config.stripe_limit(stripe) if sem.stripe_calls else sem.config.limit
            parts.append(SemaphoreStatus.parse(sem.name, None, configured, reply))
        found[sem.name] = (
            parts[0] if len(parts) == 1 else stripe_status.merged(sem.name, sem.config.limit, None, parts, None)
        )
    return found


def _rooms(client: Any, sems: list[Semaphore]) -> dict[str, RoomReply]:
    """Each waiting room's figures, all in one round trip (a room purging a burst of lapsed places is asked
    again on its own until it answers: core/visits.py)."""
    replies = scripts.run_pipeline(client, [sem.calls.room("figures") for sem in sems])
    found = {}
    for sem, reply in zip(sems, replies, strict=True):
        if isinstance(reply, Exception):
            raise reply
        parsed = RoomReply.parse(reply)
        found[sem.name] = visits.figures(sem) if parsed.code == visits.AGAIN else parsed
    return found


def _windows(client: Any, sems: list[Semaphore]) -> dict[str, list[Any]]:
    """Each adaptive semaphore's window fields; a striped one's summed over its stripes, its best the least."""
    if not sems:
        return {}
    pipe = client.pipeline(transaction=False)
    for sem in sems:
        for calls in sem.stripe_calls or (sem.calls,):
            pipe.hmget(calls.keys.state, WINDOW_FIELDS)
    replies = iter(pipe.execute())
    found = {}
    for sem in sems:
        rows = [next(replies) for _ in range(len(sem.stripe_calls) or 1)]
        found[sem.name] = rows[0] if len(rows) == 1 else _summed_windows(rows)
    return found


def _summed_windows(rows: list[list[Any]]) -> list[Any]:
    """Stripes' windows as one: holds summed and counted together, the best window the least of theirs."""
    values = [[None if v is None else v.decode() if isinstance(v, bytes) else str(v) for v in row] for row in rows]
    total = sum(state_int(row[0]) or 0 for row in values)
    count = sum(state_int(row[1]) or 0 for row in values)
    bests = [best for best in (state_float(row[2]) for row in values) if best is not None]
    return [str(total), str(count), None if not bests else repr(min(bests))]


def _adaptive(sem: Semaphore, window: list[Any] | None) -> tuple[float | None, float | None]:
    """The current window's average hold (None before its first release) and the bound it must stay under."""
    spec = sem.config.adaptive
    if spec is None or window is None:
        return None, None
    raw = [None if value is None else value.decode() if isinstance(value, bytes) else str(value) for value in window]
    total, count, best = state_int(raw[0]), state_int(raw[1]), state_float(raw[2])
    hold = total / count / 1000 if total is not None and count else None
    if spec.target is not None:
        return hold, spec.target
    return hold, None if best is None else best * spec.tolerance / 1000


def _partition_counts(
    client: Any, sems: list[Semaphore], places: bool
) -> tuple[dict[str, int], dict[str, dict[str, str]]]:
    """Each keyed semaphore's number of partitions and, when ``places``, its places (core/series.py)."""
    if not sems:
        return {}, {}
    pipe = client.pipeline(transaction=False)
    for sem in sems:
        pipe.zcard(SemaphoreKeys.partitions_of(key_prefix(), sem.name))
        if places:
            series.read_placed(pipe, sem.name)
    replies = iter(pipe.execute())
    counts, placed = {}, {}
    for sem in sems:
        counts[sem.name] = int(next(replies))
        if places:
            placed[sem.name] = series.placed(next(replies))
    return counts, placed


class Cached:
    """One reading shared by the instruments of one collection (each asks in turn, within moments).

    A reading younger than ``fresh`` seconds is given again; an outage
    gives nothing (the collection skips the observable instruments), never
    an exception.
    """

    def __init__(self, fresh: float = 1.0) -> None:
        self.fresh = fresh
        self._lock = threading.Lock()
        self._at = -1e9
        self._readings: list[SemaphoreReading] = []

    def get(self) -> list[SemaphoreReading]:
        with self._lock:
            if time.monotonic() - self._at >= self.fresh:
                self._at = time.monotonic()
                try:
                    self._readings = read()
                except Exception:  # an outage or a bug: the collection goes on without these points
                    self._readings = []
            return self._readings
