"""A keyed semaphore's partitions as the metrics report them (``SEMAPHORE_METRICS_PARTITIONS``).

At most ``SEMAPHORE_METRICS_MAX_PARTITIONS`` partitions per semaphore have a
series of their own, under their key: the places core/series.py keeps, so
that the keys a time-series database ever sees stay few however many keys
clients invent. The partitions read without a place are summed under the
key ``other``.

Each read looks at the partitions with a place and as many recorded most
recently (the ones a place may go to): at most twice the setting, whatever
the registry holds. A key is a client's text (a header, a parameter): it goes
out as the dashboard and the commands show it (core/safe_text.py), since a
scraper's terminal or a Grafana legend would act on an ESC sequence or a
bidi override the same way.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ..core import scripts, series
from ..core.replies import SemaphoreStatus
from ..core.safe_text import for_terminal
from ..core.semaphore import Semaphore
from .conf import metrics_setting


@dataclass(frozen=True)
class PartitionReading:
    """One partition with a place, named by its key (shortened as the registry keeps it, and escaped)."""

    key: str
    limit: int
    used: int
    waiting: int


@dataclass(frozen=True)
class Others:
    """The partitions read that have no place, summed: key ``other``."""

    used: int = 0
    waiting: int = 0


@dataclass(frozen=True)
class Partitions:
    parts: list[PartitionReading] = field(default_factory=list)
    others: Others = Others()


def read_partitions(client: Any, sems: list[Semaphore], placed: dict[str, dict[str, str]]) -> dict[str, Partitions]:
    """Each keyed semaphore's partitions, given the places read before (``placed``: name -> hash -> key).

    A read finds some partitions in use; the place scripts (one round trip
    for every semaphore) keep theirs for those with one and give free ones
    to the others, busiest first.
    """
    places = int(metrics_setting("SEMAPHORE_METRICS_MAX_PARTITIONS"))
    retire_ms = int(float(metrics_setting("SEMAPHORE_METRICS_PARTITION_RETIRE")) * 1000)
    read = {sem.name: _statuses(sem, placed.get(sem.name, {}), places) for sem in sems}
    calls = [series.place_call(name, _in_use(*found), places, retire_ms) for name, found in read.items()]
    replies = scripts.run_pipeline(client, calls) if calls else []
    result = {}
    for (name, (statuses, labels)), reply in zip(read.items(), replies, strict=True):
        if isinstance(reply, Exception):
            raise reply
        result[name] = _split(statuses, labels, {series.text(p) for p in reply})
    return result


def _statuses(sem: Semaphore, placed: dict[str, str], places: int) -> tuple[list[SemaphoreStatus], dict[str, str]]:
    """The statuses of the partitions with a place and of those recorded most recently; hash -> key of each."""
    labels = {**sem.partitions(places), **placed}
    return sem.partition_statuses(len(labels), 0, partitions=list(labels)), labels


def _in_use(statuses: list[SemaphoreStatus], labels: dict[str, str]) -> list[tuple[str, str]]:
    """(hash, key) of the partitions with a holder or a waiter, busiest first, then by hash (one order everywhere)."""
    busy = [s for s in statuses if s.partition and (s.used or s.waiting)]
    busy.sort(key=lambda s: (-(s.used + s.waiting), s.partition))
    return [(s.partition, labels.get(s.partition, "")) for s in busy if s.partition]


def _split(statuses: list[SemaphoreStatus], labels: dict[str, str], placed: set[str]) -> Partitions:
    """Partitions with a place under their own keys (made unique, and never ``other``); the rest summed."""
    keys = _keys(sorted(s.partition for s in statuses if s.partition in placed), labels)
    parts = []
    used = waiting = 0
    for status in statuses:
        partition = status.partition or ""
        if partition in keys:
            parts.append(PartitionReading(keys[partition], status.limit, status.used, status.waiting))
        else:
            used, waiting = used + status.used, waiting + status.waiting
    parts.sort(key=lambda part: part.key)
    return Partitions(parts, Others(used, waiting))


def _keys(partitions: list[str], labels: dict[str, str]) -> dict[str, str]:
    taken = {series.OTHER}
    keys = {}
    for partition in partitions:
        key = for_terminal(labels.get(partition) or partition[:12])
        if key in taken:
            key = f"{key}#{partition[:8]}"
        taken.add(key)
        keys[partition] = key
    return keys
