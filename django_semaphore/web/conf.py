"""The request path's settings: the flat ``SEMAPHORE_*`` settings only the web layer reads.

The engine's own settings, and ``SEMAPHORES``, are in ``core/conf.py``; these
say how a request is keyed, answered and matched, and how long its permit
lives.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from django.conf import settings

from ..core.conf import SemaphoreConfig

WEB_DEFAULTS: dict[str, Any] = {
    # Requests (the decorator and the middleware): a short lease, renewed while the request lives,
    # so a killed worker's permits come back soon; and a fixed bound on how long one request holds.
    "SEMAPHORE_WEB_LEASE": 10.0,
    "SEMAPHORE_WEB_MAX_HOLD": 600.0,
    # Request keys, the 503 response, the middleware.
    "SEMAPHORE_VIEW": None,
    "SEMAPHORE_IP_META_KEY": "REMOTE_ADDR",
    "SEMAPHORE_TRUSTED_PROXIES": 1,
    "SEMAPHORE_IPV6_PREFIX": 64,
    "SEMAPHORE_MIDDLEWARE_RULES": [],
    "SEMAPHORE_MIDDLEWARE_EXEMPT_PATHS": [],
    "SEMAPHORE_MIDDLEWARE_BYPASS": None,
    "SEMAPHORE_RATELIMIT_HEADERS": False,
}


def web_setting(name: str) -> Any:
    """One of the request path's ``SEMAPHORE_*`` settings, or its default."""
    return getattr(settings, name, WEB_DEFAULTS[name])


@dataclass(frozen=True)
class RequestLease:
    """How a request holds a permit of one semaphore: its lease, and how long at most (None: no bound)."""

    lease: float
    max_hold: float | None


def _request_lease(config: SemaphoreConfig) -> RequestLease:
    options = config.options
    # A request's permit is renewed while the request lives, so its lease only says how long a
    # killed worker's permit stays taken; without renewal it must cover the whole request.
    renewed = config.auto_renew
    lease = config.lease if "lease" in options or not renewed else float(web_setting("SEMAPHORE_WEB_LEASE"))
    # Requests are bounded even when nothing is set; an explicit None lifts the bound.
    cap = web_setting("SEMAPHORE_WEB_MAX_HOLD")
    max_hold = config.max_hold if "max_hold" in options else None if cap is None else float(cap)
    return RequestLease(lease, max_hold)


# Per semaphore name, for the configuration it was worked out for: a settings change makes new
# configurations (core/conf.py), and so new leases here.
_leases: dict[str, tuple[SemaphoreConfig, RequestLease]] = {}


def request_lease(config: SemaphoreConfig) -> RequestLease:
    """The lease and hold cap of a request's permit of ``config``'s semaphore (``SEMAPHORE_WEB_*``)."""
    cached = _leases.get(config.name)
    if cached is None or cached[0] is not config:
        cached = _leases[config.name] = (config, _request_lease(config))
    return cached[1]
