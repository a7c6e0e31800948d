"""What the metrics read from Redis at scrape or collection time: one reading of every declared semaphore.

Every process reads the same site-wide values, so one scrape of any worker
of any host gives the truth, and a dashboard takes ``max`` across instances,
never ``sum``. The cost is bounded whatever the site's size: one round trip
for the whole semaphores' states (a pipeline of status scripts), one for
the counts every process wrote (core/tally.py), one for the keyed
semaphores' partition counts, and, with ``SEMAPHORE_METRICS_PARTITIONS``,
one per keyed semaphore for at most ``SEMAPHORE_METRICS_MAX_PARTITIONS`` of
its partitions, the most recently used.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from typing import Any

from redis.exceptions import RedisError

from ..core import scripts, vanished
from ..core.adaptive import state_float, state_int
from ..core.conf import declared, key_prefix
from ..core.connection import get_client
from ..core.errors import BackendUnavailable, is_outage, reason
from ..core.redis_keys import SemaphoreKeys
from ..core.replies import SemaphoreStatus
from ..core.safe_text import for_terminal
from ..core.semaphore import Semaphore, get_semaphore
from ..core.tally import Totals, read_totals
from .conf import metrics_setting
from .names import ADAPTIVE, STATIC

# Fields of an adaptive semaphore's state hash its gauges read (core/lua/common.lua): the current
# window's summed and counted holds (ms), and the best window's average.
WINDOW_FIELDS = ("wsum", "wn", "best")


@dataclass(frozen=True)
class PartitionReading:
    """One partition of a keyed semaphore, named by its key (shortened, as the registry keeps it)."""

    key: str
    limit: int
    used: int
    waiting: int


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
    # A keyed semaphore's partitions in its registry, and the ones read (SEMAPHORE_METRICS_PARTITIONS).
    partitions: int | None = None
    parts: list[PartitionReading] = field(default_factory=list)
    # An adaptive limit's current window average and the bound it is compared with (seconds).
    hold_s: float | None = None
    target_s: float | None = None


def read() -> list[SemaphoreReading]:
    """Every declared semaphore, read now (raises ``BackendUnavailable`` when Redis does not answer)."""
    names = list(declared())
    sems = [get_semaphore(name) for name in names]
    whole = [sem for sem in sems if sem.config.key is None]
    keyed = [sem for sem in sems if sem.config.key is not None]
    try:
        client = get_client()
        statuses = _statuses(client, whole)
        windows = _windows(client, [sem for sem in whole if sem.config.adaptive is not None])
        counts = _partition_counts(client, keyed)
        totals = read_totals(client, names)
    except RedisError as exc:
        if not is_outage(exc):
            raise
        raise BackendUnavailable(f"Redis unavailable for the metrics: {reason(exc)}") from exc
    per_partition = bool(metrics_setting("SEMAPHORE_METRICS_PARTITIONS"))
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
            )
        else:
            parts = _partitions(sem) if per_partition else []
            reading = SemaphoreReading(
                sem.name, mode, sem.config.limit, totals[sem.name], partitions=counts[sem.name], parts=parts
            )
        readings.append(reading)
    return readings


def _statuses(client: Any, sems: list[Semaphore]) -> dict[str, SemaphoreStatus]:
    """Each whole semaphore's status script, no holders listed, all in one round trip."""
    replies = scripts.run_pipeline(client, [sem.calls.status(0, False) for sem in sems])
    found = {}
    for sem, reply in zip(sems, replies, strict=True):
        if isinstance(reply, Exception):
            raise reply
        vanished.report_status(sem.name, None, reply)
        found[sem.name] = SemaphoreStatus.parse(sem.name, None, sem.config.limit, reply, sem.config.adaptive)
    return found


def _windows(client: Any, sems: list[Semaphore]) -> dict[str, list[Any]]:
    if not sems:
        return {}
    pipe = client.pipeline(transaction=False)
    for sem in sems:
        pipe.hmget(sem.keys.state, WINDOW_FIELDS)
    return {sem.name: values for sem, values in zip(sems, pipe.execute(), strict=True)}


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


def _partition_counts(client: Any, sems: list[Semaphore]) -> dict[str, int]:
    if not sems:
        return {}
    pipe = client.pipeline(transaction=False)
    for sem in sems:
        pipe.zcard(SemaphoreKeys.partitions_of(key_prefix(), sem.name))
    return {sem.name: int(count) for sem, count in zip(sems, pipe.execute(), strict=True)}


def _partitions(sem: Semaphore) -> list[PartitionReading]:
    """The most recently used partitions' states, one pipeline; keys made unique where shortening merged two.

    A key is a client's text (a header, a parameter): it goes out as the
    dashboard and the commands show it (core/safe_text.py), since a scraper's
    terminal or a Grafana legend would act on an ESC sequence or a bidi
    override the same way.
    """
    labels = sem.partitions(int(metrics_setting("SEMAPHORE_METRICS_MAX_PARTITIONS")))
    statuses = sem.partition_statuses(len(labels), 0, partitions=list(labels))
    seen: set[str] = set()
    parts = []
    for status in statuses:
        partition = status.partition or ""
        key = for_terminal(labels.get(partition) or partition[:12])
        if key in seen:
            key = f"{key}#{partition[:8]}"
        seen.add(key)
        parts.append(PartitionReading(key, status.limit, status.used, status.waiting))
    return parts


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
