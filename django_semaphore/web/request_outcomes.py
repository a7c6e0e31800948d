"""What happened to each guarded request, counted in this process.

Every process counts how its acquires ended (core/tally.py) and writes the
counts to Redis per semaphore, but some outcomes of a request are no
acquire's: a request let through because Redis was
down, one a dry-run rule would have rejected, a bypassed one. These counts
live here, per process, so they survive an outage; read them with
``counts()`` (for a metrics endpoint or a test) or listen to
``semaphore_request_outcome`` to feed your own metrics.
"""

from __future__ import annotations

import threading
from collections import Counter

from ..core import signals

ACQUIRED = "acquired"  # a permit was taken and is held for the response
FULL = "full"  # no permit within the wait: rejected (or, in dry-run, would have been)
NOT_LIMITED = "not_limited"  # the key function returned None
ERROR_ALLOWED = "error_allowed"  # Redis failed and on_error="allow" let the request run
ERROR_DENIED = "error_denied"  # Redis failed and on_error="deny" answered 503
BYPASSED = "bypassed"  # an exempt path or the bypass predicate skipped the rule
DRY_RUN_FULL = "dry_run_full"  # a dry-run rule found no permit and let the request run

ALL = (ACQUIRED, FULL, NOT_LIMITED, ERROR_ALLOWED, ERROR_DENIED, BYPASSED, DRY_RUN_FULL)

_counts: Counter[tuple[str, str]] = Counter()
_lock = threading.Lock()


def record(name: str, outcome: str, **details: object) -> None:
    """Count one outcome and send ``semaphore_request_outcome`` (``details``: partition, mode, request)."""
    with _lock:
        _counts[(name, outcome)] += 1
    signals.emit(signals.semaphore_request_outcome, name=name, outcome=outcome, **details)


def counts() -> dict[str, dict[str, int]]:
    """``{semaphore name: {outcome: count}}`` since this process started (or ``reset()``)."""
    with _lock:
        snapshot = dict(_counts)
    result: dict[str, dict[str, int]] = {}
    for (name, outcome), value in sorted(snapshot.items()):
        result.setdefault(name, {})[outcome] = value
    return result


def reset() -> None:
    with _lock:
        _counts.clear()
