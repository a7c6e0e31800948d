"""The web benchmark's site: one trivial view, bare, behind ``@semaphore``, behind a middleware rule,
and wrapped by hand in a redis-py ``Lock`` acquire and release (the cost a guard is compared with); and an
async one, bare and behind ``@semaphore`` (benchmarks/asgi_release.py).
"""

from __future__ import annotations

import redis
from django.conf import settings
from django.http import HttpRequest, HttpResponse
from django.urls import path

from django_semaphore.decorators import semaphore


def bare(request: HttpRequest) -> HttpResponse:
    return HttpResponse(b"ok", content_type="text/plain")


# The client a site would make for its own lock: one per process, on the server the semaphores use.
_lock_client = redis.Redis.from_url(settings.SEMAPHORE_CONNECTION)


def locked(request: HttpRequest) -> HttpResponse:
    """The bare view, its body inside a redis-py ``Lock`` taken and given back by hand."""
    with _lock_client.lock(f"{settings.SEMAPHORE_KEY_PREFIX}web-lock", timeout=60):
        return bare(request)


async def bare_async(request: HttpRequest) -> HttpResponse:
    return HttpResponse(b"ok", content_type="text/plain")


urlpatterns = [
    path("bare-async", bare_async),
    path("decorated-async", semaphore("web")(bare_async)),
    path("bare", bare),
    path("decorated", semaphore("web")(bare)),
    path("locked", locked),
    path("ruled", bare),  # SEMAPHORE_MIDDLEWARE_RULES guards this path (benchmarks/settings.py)
]
