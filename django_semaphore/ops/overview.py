"""The operator's view of the semaphores, as plain data.

``semaphore_status --json`` and the admin dashboard's JSON endpoint print the
same dicts, so monitoring scripts and the page agree on one schema (see
README, "Operations"). A keyed semaphore is the sum of its partitions: its
numbers add up across keys, and its ``utilisation`` is that of its busiest
key, since one full key is what turns requests away. Only the
``MAX_PARTITIONS`` keys used most recently are read, whatever their number
(a key a client chooses can make millions); a row that covers fewer than all
says so with ``truncated``.

Its ``counters`` join two sources. How attempts ended and permits were given
back (``OUTCOMES``) is what every process counts of its own calls
(core/tally.py) and writes to Redis per semaphore name, once per
``SEMAPHORE_METRICS_FLUSH_INTERVAL``: the figures of the whole semaphore,
every key of a keyed one, as of the processes' last flush; ``None`` on one
partition's row (not kept per key) and when nothing is counted. The others are
what only the server sees, counted by the scripts in each partition's state.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import asdict
from typing import Any

from ..core.conf import declared
from ..core.connection import get_client
from ..core.replies import COUNTERS, Holder, SemaphoreStatus
from ..core.semaphore import Semaphore, get_semaphore
from ..core.tally import ACQUIRED, REJECTED, RELEASED, read_totals, tally
from .rooms import figures as room_figures

SCHEMA_VERSION = 2
BUSIEST = 5
MAX_HOLDERS = 100
HOUR_MS = 3_600_000
# Keys of one keyed semaphore whose status a summary reads (the most recently
# used; pipelined), so a dashboard poll costs the same at 1,000 keys or 1,000,000.
MAX_PARTITIONS = 1000
# The counters the processes count per name (see the module's docstring), before the server's own.
OUTCOMES = (ACQUIRED, REJECTED, RELEASED)
Outcomes = dict[str, int | None]


def semaphores(names: Iterable[str] = ()) -> list[Semaphore]:
    """The named semaphores (every declared one if none are named); unknown names raise."""
    wanted = list(names) or list(declared())
    return [get_semaphore(name) for name in wanted]


def is_keyed(sem: Semaphore) -> bool:
    return sem.config.key is not None and sem.partition is None


def expand(sem: Semaphore) -> list[Semaphore]:
    """The partitions an action on ``sem`` reaches: every known key of a keyed semaphore, else itself.

    Read in cursor pages: an operator's action on all keys may be long, but no single read is.
    """
    if is_keyed(sem):
        return [Semaphore(sem.config, label, partition=p) for p, label in sem.iter_partitions()]
    return [sem]


def duration(seconds: float | None) -> str:
    """Compact ages for a narrow column: 42s, 3m05s, 2h10m."""
    if seconds is None:
        return "-"
    whole = int(seconds)
    if whole < 60:
        return f"{whole}s"
    if whole < 3600:
        return f"{whole // 60}m{whole % 60:02d}s"
    return f"{whole // 3600}h{whole % 3600 // 60:02d}m"


def partition_of(sem: Semaphore, key: str) -> Semaphore:
    """One partition of a keyed semaphore, by its key or by the hash the registry lists."""
    label = sem.partition_label(key)
    if label is not None:
        return Semaphore(sem.config, label, partition=key)
    return Semaphore(sem.config, key)


def known_partition(sem: Semaphore, partition: str) -> Semaphore:
    """A partition the registry knows, by hash; LookupError otherwise (nothing is created)."""
    label = sem.partition_label(partition)
    if label is None:
        raise LookupError(f"Semaphore {sem.name!r} has no partition {partition!r}.")
    return Semaphore(sem.config, label, partition=partition)


def holder_dict(holder: Holder, now_ms: int, partition: str | None = None, key: str | None = None) -> dict[str, Any]:
    meta = holder.metadata
    return {
        "token": holder.token,
        "token_prefix": holder.token_prefix,
        "partition": partition,
        "key": key,
        "weight": holder.weight,
        "fence": holder.fence,
        # A striped semaphore's fences increase per stripe: (stripe, fence) names a grant; None otherwise.
        "stripe": holder.stripe,
        "acquired_at_ms": holder.acquired_at_ms,
        "age_s": round(max(now_ms - holder.acquired_at_ms, 0) / 1000, 1),
        "lease_deadline_ms": holder.lease_deadline_ms,
        "lease_left_s": round(max(holder.lease_deadline_ms - now_ms, 0) / 1000, 1),
        "host": meta.get("host"),
        "pid": meta.get("pid"),
        "label": meta.get("label"),
        "metadata": {k: v for k, v in meta.items() if k not in ("host", "pid", "label")},
    }


def _oldest_age(holders: list[dict[str, Any]]) -> float | None:
    return max((h["age_s"] for h in holders), default=None)


def _utilisation(used: int, limit: int) -> float:
    return round(used / limit, 3) if limit else 0.0


def partition_dict(status: SemaphoreStatus, key: str | None) -> dict[str, Any]:
    return {
        "partition": status.partition,
        "key": key,
        "limit": status.limit,
        "override": status.override,
        "used": status.used,
        "holders": status.holder_count,
        "waiting": status.waiting,
        "utilisation": _utilisation(status.used, status.limit),
    }


def stripe_dict(stripe: int, status: SemaphoreStatus) -> dict[str, Any]:
    """One stripe of a striped semaphore: its limit (its share, or an override's), use, line and fence."""
    return {
        "stripe": stripe,
        "limit": status.limit,
        "used": status.used,
        "holders": status.holder_count,
        "waiting": status.waiting,
        "utilisation": _utilisation(status.used, status.limit),
        "fence": status.fence,
    }


def outcomes(names: Iterable[str]) -> dict[str, Outcomes]:
    """Each name's OUTCOMES as every process counted them: one round trip; ``None`` each when nothing is counted."""
    wanted = list(dict.fromkeys(names))
    if not wanted or not tally.counting:
        return {name: dict.fromkeys(OUTCOMES) for name in wanted}
    found = read_totals(get_client(), wanted)
    return {
        name: {ACQUIRED: t.count(ACQUIRED), REJECTED: t.count(REJECTED), RELEASED: t.ended(RELEASED)}
        for name, t in found.items()
    }


def _counters(sem: Semaphore, server: dict[str, int], counted: Outcomes | None) -> dict[str, int | None]:
    """A row's counters: the OUTCOMES of its name (not of one partition: ``None``), then the server's own."""
    if sem.partition is not None:
        counted = dict.fromkeys(OUTCOMES)
    elif counted is None:
        counted = outcomes([sem.name])[sem.name]
    return {**counted, **server}


def summary(
    sem: Semaphore, *, holders: bool = False, history: bool = False, counted: Outcomes | None = None
) -> dict[str, Any]:
    """One semaphore (or one partition of it) in the documented schema (``counted``: its OUTCOMES, read if None)."""
    config = sem.config
    row: dict[str, Any] = {
        "name": sem.name,
        "keyed": config.key is not None,
        "partition": sem.partition,
        "key": None if sem.key is None else str(sem.key),
        "partitions": None,
        "on_error": config.on_error,
        "lease_s": config.lease,
        "configured_limit": config.limit,
        "truncated": False,
        "adaptive": None,
        # A waiting room's figures (ops/rooms.py), None for any other semaphore.
        "room": None,
        # A striped semaphore's stripes (stripe_dict), None for any other.
        "stripes": None,
    }
    if is_keyed(sem):
        labels = sem.partitions(MAX_PARTITIONS)
        known = max(sem.partition_count(), len(labels))
        statuses = sem.partition_statuses(MAX_PARTITIONS, MAX_HOLDERS, partitions=list(labels))
        listed = [
            holder_dict(h, s.now_ms, s.partition, labels.get(s.partition or "")) for s in statuses for h in s.holders
        ]
        parts = sorted(
            (partition_dict(s, labels.get(s.partition or "")) for s in statuses),
            key=lambda p: (p["utilisation"], p["waiting"]),
            reverse=True,
        )
        row.update(
            partitions=known,
            truncated=len(statuses) < known,
            limit=config.limit,
            override=None,
            used=sum(s.used for s in statuses),
            holders=sum(s.holder_count for s in statuses),
            waiting=sum(s.waiting for s in statuses),
            utilisation=parts[0]["utilisation"] if parts else 0.0,
            fence=None,
            now_ms=max((s.now_ms for s in statuses), default=None),
            counters=_counters(sem, {c: sum(s.counters[c] for s in statuses) for c in COUNTERS}, counted),
            busiest=parts[:BUSIEST],
            history=[],
        )
    else:
        status = sem.status(MAX_HOLDERS, history=history)
        listed = [holder_dict(h, status.now_ms, sem.partition, row["key"]) for h in status.holders]
        recent = [s for s in status.history if s.at_ms >= status.now_ms - HOUR_MS]
        row.update(
            limit=status.limit,
            override=status.override,
            used=status.used,
            holders=status.holder_count,
            waiting=status.waiting,
            utilisation=_utilisation(status.used, status.limit),
            fence=status.fence,
            now_ms=status.now_ms,
            counters=_counters(sem, status.counters, counted),
            busiest=[],
            history=[
                {"at_ms": s.at_ms, "peak_used": s.peak_used, "waiting": s.waiting, "limit": s.limit} for s in recent
            ],
            adaptive=asdict(status.adaptive) if status.adaptive else None,
            room=room_figures(sem),
        )
        if status.stripes:
            # Each stripe counts its own fences: no one number is the semaphore's (see stripes' own).
            row.update(fence=None, stripes=[stripe_dict(s, part) for s, part in enumerate(status.stripes)])
    row["oldest_holder_age_s"] = _oldest_age(listed)
    if holders:
        row["holder_list"] = sorted(listed, key=lambda h: h["acquired_at_ms"])
    if not history:
        row.pop("history")
    return row


def overview(names: Iterable[str] = (), *, holders: bool = False, history: bool = False) -> dict[str, Any]:
    """Every named semaphore's summary, wrapped with the schema version."""
    listed = semaphores(names)
    counted = outcomes(sem.name for sem in listed)
    return {
        "schema": SCHEMA_VERSION,
        "semaphores": [summary(sem, holders=holders, history=history, counted=counted[sem.name]) for sem in listed],
    }
