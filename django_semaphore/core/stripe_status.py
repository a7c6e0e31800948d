"""A striped semaphore's status: its stripes' statuses, added up into one, each kept beside it.

What an operator reads of a striped semaphore is what they would read of
one semaphore: the limit in force is the sum of the stripes' (each stripe's
share, or an override's, or its adaptive rule's), ``used``, the holders and
the line are the stripes' together, the counters their sums (each stripe
counts what it answered: a call its stripe turned away and another granted
counts one ``rejected`` and one ``acquired``), the override the site-wide
limit an operator set. Each holder says its stripe, and the stripes'
own statuses come with it (``stripes``), for the dashboard's and
``semaphore_status``'s per-stripe lines. History: the stripes sample on their
own, so their samples are added up per sampling period (a 10-second slot):
a slot's peak is the sum of the stripes' peaks in it, at least the true peak.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import replace

from .adaptive import AdaptiveLimit, AdaptiveStatus
from .conf import HISTORY_EVERY_MS
from .replies import COUNTERS, Sample, SemaphoreStatus


def merged(
    name: str, configured: int, override: int | None, statuses: list[SemaphoreStatus], adaptive: AdaptiveLimit | None
) -> SemaphoreStatus:
    """One status for the whole semaphore from its stripes' (in stripe order)."""
    holders = [replace(holder, stripe=stripe) for stripe, status in enumerate(statuses) for holder in status.holders]
    holders.sort(key=lambda holder: holder.lease_deadline_ms)
    return SemaphoreStatus(
        name=name,
        partition=None,
        limit=sum(status.limit for status in statuses),
        configured_limit=configured,
        override=override,
        used=sum(status.used for status in statuses),
        holder_count=sum(status.holder_count for status in statuses),
        waiting=sum(status.waiting for status in statuses),
        fence=max(status.fence for status in statuses),
        counters={counter: sum(status.counters[counter] for status in statuses) for counter in COUNTERS},
        holders=holders,
        now_ms=max(status.now_ms for status in statuses),
        history=_history(statuses),
        adaptive=_adaptive(adaptive, statuses),
        stripes=tuple(statuses),
    )


def _history(statuses: list[SemaphoreStatus]) -> list[Sample]:
    """The stripes' samples added up per sampling slot (the last slot of each stripe counts once)."""
    slots: dict[int, list[Sample]] = defaultdict(list)
    for status in statuses:
        latest: dict[int, Sample] = {}
        for sample in status.history:
            latest[sample.at_ms // HISTORY_EVERY_MS] = sample
        for slot, sample in latest.items():
            slots[slot].append(sample)
    merged_samples = []
    for slot in sorted(slots):
        samples = slots[slot]
        limits = [sample.limit for sample in samples]
        merged_samples.append(
            Sample(
                at_ms=max(sample.at_ms for sample in samples),
                peak_used=sum(sample.peak_used for sample in samples),
                waiting=sum(sample.waiting for sample in samples),
                limit=None if None in limits else sum(limit for limit in limits if limit is not None),
            )
        )
    return merged_samples


def _adaptive(spec: AdaptiveLimit | None, statuses: list[SemaphoreStatus]) -> AdaptiveStatus | None:
    """The rule as a whole: the stripes' rules' limits added up, within the semaphore's own min and max."""
    parts = [status.adaptive for status in statuses if status.adaptive is not None]
    if spec is None or not parts:
        return None
    last = max(parts, key=lambda part: part.changed_at_ms or 0)
    bests = [part.best_hold_s for part in parts if part.best_hold_s is not None]
    return AdaptiveStatus(
        limit=sum(part.limit for part in parts),
        min=spec.min,
        max=spec.max,
        initial=spec.initial,
        target_s=spec.target,
        window_s=spec.window,
        best_hold_s=min(bests) if bests else None,
        changed_at_ms=last.changed_at_ms,
        reason=last.reason,
    )
