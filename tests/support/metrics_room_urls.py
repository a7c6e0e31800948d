"""The metrics endpoint beside one view a waiting room guards (tests/faces/test_metrics_room.py)."""

from __future__ import annotations

from django.http import HttpRequest, HttpResponse
from django.urls import include, path

from django_semaphore.decorators import semaphore


@semaphore("sale")
def sale(request: HttpRequest) -> HttpResponse:
    return HttpResponse("in")


urlpatterns = [path("sale/", sale), path("metrics/", include("django_semaphore.metrics.urls"))]
