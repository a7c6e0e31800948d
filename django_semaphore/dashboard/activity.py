"""What the semaphores did lately, for an incident: outcomes per second, wait and hold percentiles, and since when.

Read from the counts every process of every host writes to Redis
(core/tally.py, lua/tally.lua), the same duration buckets the metrics
export, so the page and a Prometheus query agree. One round trip for every
semaphore on the page: its totals hash (with ``since``, when counting began)
and its recent hash (counts per 10-second slot of the server's clock). The
cost is per declared name, never per partition: a keyed semaphore's
partitions add up in one place.

"The last minute" is the six whole slots before the current one and the
current one so far: 60 to 70 seconds, and the rates divide by exactly that
(or by the time since counting began, when that is shorter).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from ..core.connection import get_client
from ..core.tally import (
    ACQUIRED,
    BOUNDS,
    BUCKETS,
    COUNT_SLOTS,
    REJECTED,
    RESULTS,
    SLOT_MS,
    TIMED_OUT,
    Totals,
    recent_key,
    rows_of,
    tally,
    tally_key,
)

# The outcomes the page shows, in its order.
SHOWN = (ACQUIRED, REJECTED, TIMED_OUT)
# Whole slots before the current one that make "the last minute".
MINUTE_SLOTS = 60_000 // SLOT_MS
# The shortest span a rate divides by: counts arrive in batches, and one
# batch written a moment after counting began is not a burst.
MIN_SPAN_MS = SLOT_MS
QUANTILES = (("p50", 0.5), ("p95", 0.95))


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def slot_counts(raw: dict[Any, Any]) -> dict[int, dict[str, int]]:
    """A recent hash (lua/tally.lua) read back: slot -> field ("c0", "w3", "h7"...) -> count."""
    slots: dict[int, dict[str, int]] = {}
    for key, value in raw.items():
        slot, _, field = _text(key).partition("|")
        if not field or not slot.isdigit():
            continue  # "slot", the newest slot written
        try:
            slots.setdefault(int(slot), {})[field] = int(_text(value))
        except ValueError:
            continue
    return slots


def quantile(buckets: list[int], fraction: float) -> float | None:
    """The ``fraction`` quantile of a histogram laid out as core/tally.py's BOUNDS (seconds).

    Linear within the bucket it falls in, as Prometheus's
    ``histogram_quantile`` does, so the page and a Grafana panel on the same
    buckets show the same number. In the last bucket (above every bound) it
    is that bound: the most the buckets can say. None without a sample.
    """
    total = sum(buckets)
    if not total:
        return None
    rank = fraction * total
    below = 0
    for index, count in enumerate(buckets):
        if count and below + count >= rank:
            if index >= len(BOUNDS):
                return BOUNDS[-1]
            lower = BOUNDS[index - 1] if index else 0.0
            return lower + (BOUNDS[index] - lower) * (rank - below) / count
        below += count
    return BOUNDS[-1]


def _percentiles(slots: dict[int, dict[str, int]], prefix: str, first: int, last: int) -> dict[str, Any]:
    buckets = [sum(slots.get(s, {}).get(f"{prefix}{i}", 0) for s in range(first, last + 1)) for i in range(BUCKETS)]
    found: dict[str, Any] = {name: quantile(buckets, fraction) for name, fraction in QUANTILES}
    found["count"] = sum(buckets)
    return found


def summarise(totals_raw: dict[Any, Any], recent_raw: dict[Any, Any], now_ms: int) -> dict[str, Any]:
    """One semaphore's activity, from its two hashes as HGETALL returns them, at the server's ``now_ms``."""
    fields = [(_text(k), _text(v)) for k, v in totals_raw.items()]
    since = next((v for k, v in fields if k == "since"), None)
    since_ms = int(since) if since and since.isdigit() else None
    counted = Totals(since_ms, *rows_of(fields))
    totals = {result: counted.count(result) for result in SHOWN}
    slots = slot_counts(recent_raw)
    current = now_ms // SLOT_MS
    first = current - MINUTE_SLOTS
    start_ms = first * SLOT_MS if since_ms is None else max(first * SLOT_MS, since_ms)
    span_ms = max(now_ms - start_ms, MIN_SPAN_MS)
    minute = {
        result: sum(slots.get(s, {}).get(f"c{RESULTS.index(result)}", 0) for s in range(first, current + 1))
        for result in SHOWN
    }
    return {
        "since_ms": since_ms,
        "totals": totals,
        "minute": minute,
        "minute_s": round(span_ms / 1000, 1),
        "per_second": {result: round(count * 1000 / span_ms, 2) for result, count in minute.items()},
        "wait": _percentiles(slots, "w", first, current),
        "hold": _percentiles(slots, "h", first, current),
        "slots": slots,
    }


def per_slot(slots: dict[int, dict[str, int]], first: int, last: int) -> dict[str, list[int]]:
    """Counts of each shown outcome in each slot from ``first`` to ``last`` (0 where nothing was written)."""
    return {
        result: [slots.get(s, {}).get(f"c{RESULTS.index(result)}", 0) for s in range(first, last + 1)]
        for result in SHOWN
    }


def oldest_slot(slots: dict[int, dict[str, int]], now_ms: int) -> int:
    """The oldest slot still kept (an hour's worth), or the current one when there is none."""
    current = now_ms // SLOT_MS
    kept = [s for s in slots if s > current - COUNT_SLOTS]
    return min(kept, default=current)


def read(names: Iterable[str], now_ms: int | None) -> dict[str, dict[str, Any]]:
    """Each name's activity, one pipeline for all; ``now_ms`` the server's clock (read here if None).

    With counting off (``SEMAPHORE_METRICS_FLUSH_INTERVAL = None``) the
    result says so under ``counting``: the page then says why it has no rates.
    """
    wanted = list(names)
    if not wanted:
        return {}
    client = get_client()
    pipe = client.pipeline(transaction=False)
    for name in wanted:
        pipe.hgetall(tally_key(name))
        pipe.hgetall(recent_key(name))
    replies = pipe.execute()
    if now_ms is None:
        seconds, micros = client.time()
        now_ms = int(seconds) * 1000 + int(micros) // 1000
    counting = tally.counting
    found = {}
    for index, name in enumerate(wanted):
        found[name] = summarise(replies[2 * index], replies[2 * index + 1], now_ms)
        found[name]["counting"] = counting
        found[name]["now_ms"] = now_ms
    return found
