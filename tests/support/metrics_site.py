"""The site a real Prometheus scrapes under load: guarded views and the metrics endpoint."""

import os
import time

from django.core.wsgi import get_wsgi_application

application = get_wsgi_application()  # Django is set up before the views' module-level decorators run

from django.http import HttpRequest, HttpResponse  # noqa: E402
from django.urls import include, path  # noqa: E402

from django_semaphore.decorators import semaphore  # noqa: E402


@semaphore("load")
def work(request: HttpRequest) -> HttpResponse:
    time.sleep(0.03)
    return HttpResponse(str(os.getpid()))  # which worker served it: the test wants both


@semaphore("paced")
def paced(request: HttpRequest) -> HttpResponse:
    time.sleep(0.01)
    return HttpResponse("done")


@semaphore("per_user")
def mine(request: HttpRequest) -> HttpResponse:
    return HttpResponse("done")


@semaphore("flood")
def flood(request: HttpRequest) -> HttpResponse:
    time.sleep(0.3)  # held long enough that every scrape finds some of the flood's keys in use
    return HttpResponse("done")


@semaphore("launch")
def launch(request: HttpRequest) -> HttpResponse:
    return HttpResponse("in")


urlpatterns = [
    path("launch/", launch),
    path("flood/", flood),
    path("mine/", mine),
    path("work/", work),
    path("paced/", paced),
    path("metrics/", include("django_semaphore.metrics.urls")),
]
