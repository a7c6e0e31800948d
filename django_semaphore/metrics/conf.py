"""The metrics face's settings (the engine's flush interval is in core/conf.py)."""

from __future__ import annotations

from typing import Any

from django.conf import settings

METRICS_DEFAULTS: dict[str, Any] = {
    # Bearer tokens a scraper may show instead of a staff login: one string, or a list (rotation).
    "SEMAPHORE_METRICS_TOKEN": None,
    # Keyed semaphores: report usage and waiters per partition (attribute/label `key`) too.
    "SEMAPHORE_METRICS_PARTITIONS": False,
    # ... at most this many per semaphore under their own keys, the rest as "other" (core/series.py),
    "SEMAPHORE_METRICS_MAX_PARTITIONS": 50,
    # ... each keeping its place until no scrape found it in use for this many seconds.
    "SEMAPHORE_METRICS_PARTITION_RETIRE": 86_400,
}


def metrics_setting(name: str) -> Any:
    """One of the metrics face's ``SEMAPHORE_METRICS_*`` settings, or its default."""
    return getattr(settings, name, METRICS_DEFAULTS[name])


def tokens() -> list[str]:
    """The bearer tokens that open the endpoint (none: staff users only)."""
    value = metrics_setting("SEMAPHORE_METRICS_TOKEN")
    if value is None:
        return []
    return [value] if isinstance(value, str) else [token for token in value if isinstance(token, str) and token]
