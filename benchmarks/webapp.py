"""The web benchmark's site: one trivial view, bare, behind ``@semaphore``, and behind a middleware rule."""

from __future__ import annotations

from django.http import HttpRequest, HttpResponse
from django.urls import path

from django_semaphore.decorators import semaphore


def bare(request: HttpRequest) -> HttpResponse:
    return HttpResponse(b"ok", content_type="text/plain")


urlpatterns = [
    path("bare", bare),
    path("decorated", semaphore("web")(bare)),
    path("ruled", bare),  # SEMAPHORE_MIDDLEWARE_RULES guards this path (benchmarks/settings.py)
]
