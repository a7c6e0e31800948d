"""A guarded view that is stuck for ``STUCK_FOR`` seconds (waiting, as on a slow query or a partner), sync and async."""

from __future__ import annotations

import asyncio
import os
import signal
import time

from django.http import HttpRequest, HttpResponse
from django.urls import path

from django_semaphore.decorators import semaphore

STUCK_FOR = float(os.environ.get("STUCK_FOR", "0"))


@semaphore("stuck")
def stuck(request: HttpRequest) -> HttpResponse:
    time.sleep(STUCK_FOR)
    return HttpResponse(b"done")


@semaphore("stuck")
def stuck_deaf(request: HttpRequest) -> HttpResponse:
    """Stuck where no signal handler runs (a long call into C): gunicorn's SIGABRT waits, its SIGKILL does not."""
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGABRT})
    try:
        time.sleep(STUCK_FOR)
    finally:
        signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGABRT})
    return HttpResponse(b"done")


@semaphore("stuck")
async def stuck_async(request: HttpRequest) -> HttpResponse:
    await asyncio.sleep(STUCK_FOR)
    return HttpResponse(b"done")


urlpatterns = [path("stuck/", stuck), path("stuck-deaf/", stuck_deaf), path("stuck-async/", stuck_async)]
