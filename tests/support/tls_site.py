"""A guarded view, sync and async, counting who is inside on a referee (tests/system/test_tls_cold_start.py).

Each answer says how its request was let in (``acquired``, ``error_allowed``:
Redis failed and the request ran unguarded, ``full``), and the referee keeps
the most requests ever inside at once.
"""

from __future__ import annotations

import asyncio
import functools
import time

import redis
import redis.asyncio
from django.conf import settings
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.urls import path

from django_semaphore.decorators import semaphore

# The test reads these keys (under the site's key prefix).
INSIDE, MOST = "cold:inside", "cold:most"
HOLD = 0.3
# Keep the highest count seen: one round trip, atomic on the referee.
_MOST = "local n = redis.call('INCR', KEYS[1]) if n > tonumber(redis.call('GET', KEYS[2]) or 0) then "
_MOST += "redis.call('SET', KEYS[2], n) end return n"
_async_referees: dict[asyncio.AbstractEventLoop, redis.asyncio.Redis] = {}


@functools.cache
def _sync_referee() -> redis.Redis:
    return redis.Redis.from_url(settings.REFEREE_URL)


def _keys() -> list[str]:
    return [settings.SEMAPHORE_KEY_PREFIX + INSIDE, settings.SEMAPHORE_KEY_PREFIX + MOST]


def _answer(request: HttpRequest) -> JsonResponse:
    return JsonResponse({"outcome": request.semaphore.outcome})  # type: ignore[attr-defined]


@semaphore("cold")
def cold(request: HttpRequest) -> HttpResponse:
    _sync_referee().eval(_MOST, 2, *_keys())
    try:
        time.sleep(HOLD)
    finally:
        _sync_referee().decr(_keys()[0])
    return _answer(request)


@semaphore("cold")
async def cold_async(request: HttpRequest) -> HttpResponse:
    loop = asyncio.get_running_loop()
    referee = _async_referees.get(loop)
    if referee is None:
        referee = _async_referees[loop] = redis.asyncio.Redis.from_url(settings.REFEREE_URL)
    await referee.eval(_MOST, 2, *_keys())
    try:
        await asyncio.sleep(HOLD)
    finally:
        await referee.decr(_keys()[0])
    return _answer(request)


def ready(request: HttpRequest) -> HttpResponse:
    """Answers without Redis: the server is up, and no connection to Redis is made yet."""
    return HttpResponse(b"ready")


urlpatterns = [path("cold/", cold), path("cold-async/", cold_async), path("ready/", ready)]
