"""The web benchmark's site: one trivial view, bare and guarded.

The guard is the ``@semaphore`` decorator when django_semaphore.decorators
exists, else the same work written by hand (``with get_semaphore(...)``);
``GUARD`` says which, and the harness reports it.
"""

from __future__ import annotations

from collections.abc import Callable

from django.http import HttpRequest, HttpResponse
from django.urls import path

from django_semaphore import get_semaphore


def bare(request: HttpRequest) -> HttpResponse:
    return HttpResponse(b"ok", content_type="text/plain")


def by_hand(view: Callable[[HttpRequest], HttpResponse]) -> Callable[[HttpRequest], HttpResponse]:
    def guarded_view(request: HttpRequest) -> HttpResponse:
        with get_semaphore("web"):
            return view(request)

    return guarded_view


try:
    from django_semaphore.decorators import semaphore
except ImportError:
    GUARD = "with get_semaphore()"
    guarded = by_hand(bare)
else:
    GUARD = "@semaphore decorator"
    guarded = semaphore("web")(bare)

urlpatterns = [
    path("bare", bare),
    path("guarded", guarded),
    path("guard", lambda request: HttpResponse(GUARD.encode(), content_type="text/plain")),
]
