"""The request path's settings: the flat ``SEMAPHORE_*`` settings only the web layer reads.

The engine's own settings, and ``SEMAPHORES``, are in ``core/conf.py``; these
say how a request is keyed, answered and matched, and how long its permit
lives (``web/admission.py`` works a request's lease out from them).
"""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.core.signals import setting_changed

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
    # REST framework's throttle_scope -> semaphore name, for SemaphoreThrottle (django_semaphore/rest_framework.py).
    "SEMAPHORE_THROTTLE_SCOPES": {},
}


# The settings as last read: asked for on every request, read again when a setting changes. A setting a
# project leaves out costs Django's lookup an exception each time it is asked for.
_read: dict[str, Any] = {}


def web_setting(name: str) -> Any:
    """One of the request path's ``SEMAPHORE_*`` settings, or its default."""
    try:
        return _read[name]
    except KeyError:
        value = _read[name] = getattr(settings, name, WEB_DEFAULTS[name])
        return value


def _forget(**kwargs: Any) -> None:
    _read.clear()


setting_changed.connect(_forget, dispatch_uid="django_semaphore.web.conf")
