"""The instruments: names, kinds, units and attribute keys, the public contract (docs/guides/metrics.md).

OpenTelemetry names are dotted; the Prometheus endpoint writes the same
instruments with underscores, base units in the name (``_seconds``), ``_total``
on counters, and short label names (``name``, ``state``, ``result``...).
"""

from __future__ import annotations

METER = "django_semaphore"

# Attribute keys (OpenTelemetry) and the Prometheus label each becomes.
NAME = "django_semaphore.name"
STATE = "django_semaphore.permit.state"
MODE = "django_semaphore.limit.mode"
RESULT = "django_semaphore.acquire.result"
REASON = "django_semaphore.release.reason"
ERROR_TYPE = "error.type"
ON_ERROR = "django_semaphore.on_error"
DRY_RUN = "django_semaphore.dry_run"
KEY = "django_semaphore.key"
ROOM_STATE = "django_semaphore.room.state"
ROOM_STAGE = "django_semaphore.room.stage"
QUANTILE = "django_semaphore.room.quantile"
LABELS = {
    NAME: "name",
    STATE: "state",
    MODE: "mode",
    RESULT: "result",
    REASON: "reason",
    ERROR_TYPE: "error_type",
    ON_ERROR: "on_error",
    DRY_RUN: "dry_run",
    KEY: "key",
    ROOM_STATE: "state",
    ROOM_STAGE: "stage",
    QUANTILE: "quantile",
}

USED, FREE = "used", "free"
STATIC, ADAPTIVE = "static", "adaptive"

# Each instrument: its name, its unit, and what it measures (the help text of both exports), a line each.
USAGE = (
    "django_semaphore.permit.usage",
    "{permit}",
    "Permits in use (state=used) and free (the limit in force less those in use, at least 0).",
)
LIMIT = (
    "django_semaphore.permit.limit",
    "{permit}",
    "The limit in force (per partition for a keyed semaphore).",
)
WAITERS = (
    "django_semaphore.waiter.count",
    "{waiter}",
    "Callers waiting in line for a permit.",
)
PARTITIONS = (
    "django_semaphore.partition.count",
    "{partition}",
    "A keyed semaphore's partitions in its registry (recorded in the last two idle periods).",
)
ATTEMPTS = (
    "django_semaphore.acquire.attempts",
    "{attempt}",
    "Acquires, by how they ended.",
)
ACQUIRE_DURATION = (
    "django_semaphore.acquire.duration",
    "s",
    "How long an acquire took, from the call to its answer, by how it ended.",
)
HOLD_DURATION = (
    "django_semaphore.permit.hold.duration",
    "s",
    "How long a permit was held, by how it ended.",
)
LOST = (
    "django_semaphore.permit.lost",
    "{permit}",
    "Permits their holders lost: expired, revoked or at their max hold.",
)
ADAPTIVE_HOLD = (
    "django_semaphore.adaptive.hold_time",
    "s",
    "An adaptive limit's average hold in its current window.",
)
ADAPTIVE_TARGET = (
    "django_semaphore.adaptive.target",
    "s",
    "The average hold above which an adaptive limit is cut: its target, or its best window's times its tolerance.",
)


# A waiting room's people (the room family: counted in visitors, not in requests or permits).
INSIDE, WAITING = "inside", "waiting"
LINE = "line"
ROOM_VISITORS = (
    "django_semaphore.room.visitors",
    "{visitor}",
    "A waiting room's visitors: in line (state=waiting) and inside (state=inside).",
)
ROOM_RATE = (
    "django_semaphore.room.admission.rate",
    "{visitor}/s",
    "Visitors a waiting room lets in from its line per second: the rate its estimated waits divide by (0 unknown).",
)
ROOM_WAIT = (
    "django_semaphore.room.wait.estimate",
    "s",
    "The longest estimated wait a waiting room shows: its last in line's (absent while nobody waits or unknown).",
)
ROOM_FULL = (
    "django_semaphore.room.full.duration",
    "s",
    "How long a waiting room's line has not been empty (0 while nobody waits).",
)
ROOM_TIME = (
    "django_semaphore.room.time",
    "s",
    "A waiting room's visitors' time in line (stage=line) and inside (stage=inside), by quantile (0.5, 0.95).",
)
ROOM_ABANDONED = (
    "django_semaphore.room.abandoned",
    "{visitor}",
    "Places in a waiting room's line abandoned: their visitors stopped asking.",
)
ROOM_TURNED_AWAY = (
    "django_semaphore.room.turned_away",
    "{visitor}",
    "New places a waiting room refused (a client address's bounds): real refusals, not polls of people in line.",
)


def prometheus_name(instrument: str, unit: str) -> str:
    """``django_semaphore.acquire.duration`` (s) -> ``django_semaphore_acquire_duration_seconds``."""
    base = instrument.replace(".", "_")
    return base + "_seconds" if unit == "s" else base
