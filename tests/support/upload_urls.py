"""Views that take a body, for the slow-body tests: under the test client and under a real gunicorn.

``/uploads/middleware/`` is guarded by a middleware rule (``UPLOAD_RULE``),
``/uploads/decorated/`` by ``@semaphore``, ``/uploads/open/`` by nothing (what
a request does without the guard). Each reads its body the way its ``?read=``
asks and answers what it got, so a test can compare guarded with unguarded.
No CSRF middleware runs on the gunicorn site, and these views are exempt
from it under the suite's settings, as an API's would be.

A process serving them counts the requests Django has started, per path, in
Redis (``started_key``): a test knows a trickling client's request is inside
Django before it sends the next one.
"""

from __future__ import annotations

import os
from typing import Any

import redis
from django.core.signals import request_started
from django.http import HttpRequest, JsonResponse
from django.urls import path
from django.views.decorators.csrf import csrf_exempt

from django_semaphore.decorators import semaphore

NAME = "uploads"
UPLOAD_RULE = {"semaphore": NAME, "path": r"^/uploads/middleware/"}
CHUNK = 65_536


def started_key(prefix: str, route: str) -> str:
    return f"{prefix}started:{route}"


def _received(request: HttpRequest) -> dict[str, Any]:
    how = request.GET.get("read", "body")
    if how == "stream":  # a view that streams its upload, as one over DATA_UPLOAD_MAX_MEMORY_SIZE must
        size = 0
        while chunk := request.read(CHUNK):
            size += len(chunk)
        return {"bytes": size}
    if how == "files":
        return {"files": {name: upload.size for name, upload in request.FILES.items()}, "fields": len(request.POST)}
    return {"bytes": len(request.body)}


@csrf_exempt
def guarded_by_rule(request: HttpRequest) -> JsonResponse:
    return JsonResponse(_received(request))


@csrf_exempt
@semaphore(NAME)
def decorated(request: HttpRequest) -> JsonResponse:
    return JsonResponse(_received(request))


@csrf_exempt
@semaphore(NAME)
async def decorated_async(request: HttpRequest) -> JsonResponse:
    return JsonResponse(_received(request))


@csrf_exempt
def unguarded(request: HttpRequest) -> JsonResponse:
    return JsonResponse(_received(request))


def _count_started(sender: object, environ: dict[str, Any] | None = None, **kwargs: Any) -> None:
    url = os.environ.get("UPLOAD_SITE_REDIS_URL")
    if url and environ is not None:
        with redis.Redis.from_url(url) as client:
            client.incr(started_key(os.environ.get("SEMAPHORE_KEY_PREFIX", ""), environ.get("PATH_INFO", "")))


if os.environ.get("UPLOAD_SITE_REDIS_URL"):  # only in a process serving the gunicorn site
    request_started.connect(_count_started, dispatch_uid="tests.upload_urls.started")

urlpatterns = [
    path("uploads/middleware/", guarded_by_rule),
    path("uploads/decorated/", decorated),
    path("uploads/decorated-async/", decorated_async),
    path("uploads/open/", unguarded),
]
