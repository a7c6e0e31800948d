"""The workers experiment's views: the same work (a sleep, as a slow query would wait) sync and async."""

from __future__ import annotations

import asyncio
import time

from django.http import HttpRequest, HttpResponse
from django.urls import path

from django_semaphore.decorators import semaphore

WORK_SECONDS = 0.2


@semaphore("work")
def work(request: HttpRequest) -> HttpResponse:
    time.sleep(WORK_SECONDS)
    return HttpResponse(b"done", content_type="text/plain")


@semaphore("work")
async def work_async(request: HttpRequest) -> HttpResponse:
    await asyncio.sleep(WORK_SECONDS)
    return HttpResponse(b"done", content_type="text/plain")


urlpatterns = [path("work", work), path("work-async", work_async)]
