"""Views whose permits go back after their responses are sent: counted inside, and one slow to close."""

from __future__ import annotations

import time

import redis
from django.conf import settings
from django.http import HttpRequest, HttpResponse
from django.urls import path

from django_semaphore.decorators import semaphore

# The test reads these keys: how many requests are inside a view now, and how often more than the limit were.
INSIDE, OVER = "after-response:inside", "after-response:over"
LIMIT = 2
_client = redis.Redis.from_url(settings.CACHES["default"]["LOCATION"])


def _counted(name: str) -> HttpResponse:
    inside = f"{settings.SEMAPHORE_KEY_PREFIX}{INSIDE}:{name}"
    if _client.incr(inside) > LIMIT:
        _client.incr(f"{settings.SEMAPHORE_KEY_PREFIX}{OVER}:{name}")
    time.sleep(0.002)
    _client.decr(inside)
    return HttpResponse(b"ok")


@semaphore("counted")
def counted(request: HttpRequest) -> HttpResponse:
    return _counted("counted")


def ruled(request: HttpRequest) -> HttpResponse:
    return _counted("ruled")


class SlowToClose(HttpResponse):
    """Sent whole, then closed only after the test has killed the worker: the release never runs."""

    def close(self) -> None:
        time.sleep(300)
        super().close()


@semaphore("slow-close")
def slow_close(request: HttpRequest) -> HttpResponse:
    return SlowToClose(b"sent")


urlpatterns = [path("counted/", counted), path("ruled/", ruled), path("slow-close/", slow_close)]
