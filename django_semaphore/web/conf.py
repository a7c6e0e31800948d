"""The request path's settings: the flat ``SEMAPHORE_*`` settings only the web layer reads.

The engine's own settings, and ``SEMAPHORES``, are in ``core/conf.py``; these
say how a request is keyed, answered and matched, and how long its permit
lives (``web/admission.py`` works a request's lease out from them).
"""

from __future__ import annotations

from typing import Any

from django.conf import settings

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
