"""A site behind waiting rooms: views the decorator guards, a part the middleware guards, and pages outside.

The URLconf of the waiting-room tests (tests/faces/test_waiting_room.py) and of
the gunicorn they start (tests/support/room_settings.py). Each guarded view
answers who it let in (the visitor's ticket id) as JSON, so a test reads facts
from inside the request.
"""

from __future__ import annotations

import asyncio
import time

from django.contrib.staticfiles.views import serve
from django.http import HttpRequest, HttpResponse, JsonResponse, StreamingHttpResponse
from django.urls import path, re_path
from django.views.decorators.csrf import csrf_exempt

from django_semaphore import get_semaphore
from django_semaphore.decorators import semaphore
from django_semaphore.waiting_room import aend_visit, end_visit, visit_of


def _inside(request: HttpRequest, name: str = "room") -> dict:
    visit = visit_of(request, name)
    return {
        "inside": visit.inside if visit else None,
        "visitor": visit.visitor if visit else None,
        "fence": visit.reply.fence if visit else None,
        "used": get_semaphore(name).status().used,
    }


@semaphore("room")
def page(request: HttpRequest) -> JsonResponse:
    return JsonResponse(_inside(request))


@semaphore("room")
def welcome(request: HttpRequest) -> HttpResponse:
    """What a browser sees once let in (the browser test reads its heading)."""
    visit = visit_of(request, "room")
    fence = visit.reply.fence if visit else 0
    return HttpResponse(f"<!DOCTYPE html><title>In</title><h1>Welcome, you are in</h1><p id='fence'>{fence}</p>")


@semaphore("room")
async def page_async(request: HttpRequest) -> JsonResponse:
    visit = visit_of(request, "room")
    return JsonResponse({"inside": visit.inside if visit else None, "visitor": visit.visitor if visit else None})


# The views that end a visit take a POST (a GET ends nothing: any site can make a browser send one). The
# tests post to them as scripts, without a form's CSRF token.
@csrf_exempt
@semaphore("room")
def done(request: HttpRequest) -> JsonResponse:
    """The last step: the visit ends now, and the next in line is let in."""
    return JsonResponse({**_inside(request), "ended": end_visit(request)})


@csrf_exempt
@semaphore("room")
async def done_async(request: HttpRequest) -> JsonResponse:
    return JsonResponse({"ended": await aend_visit(request)})


@csrf_exempt
@semaphore("room")
def done_by_header(request: HttpRequest) -> JsonResponse:
    response = JsonResponse(_inside(request))
    response["Semaphore-Room"] = "end"
    return response


@semaphore("room")
def slow(request: HttpRequest) -> HttpResponse:
    time.sleep(float(request.GET.get("seconds", "0.5")))
    return HttpResponse("slow")


@semaphore("room")
def stream(request: HttpRequest) -> StreamingHttpResponse:
    return StreamingHttpResponse(iter([b"one ", b"two"]))


@semaphore("room", block=False)
def own_page(request: HttpRequest) -> JsonResponse:
    visit = visit_of(request, "room")
    return JsonResponse({"inside": visit.inside, "position": visit.position, "limited": request.semaphore.limited})


@semaphore("room", raise_exception=True)
def raising(request: HttpRequest) -> JsonResponse:
    return JsonResponse(_inside(request))


@csrf_exempt
def outside(request: HttpRequest) -> JsonResponse:
    """A page no room guards: a visitor's "thank you" page, which ends the visit by its ticket."""
    return JsonResponse({"ended": end_visit(request, "room")})


@csrf_exempt
async def outside_async(request: HttpRequest) -> JsonResponse:
    await asyncio.sleep(0)
    return JsonResponse({"ended": await aend_visit(request, "room")})


def middleware_page(request: HttpRequest) -> JsonResponse:
    """Guarded by a middleware rule (SEMAPHORE_MIDDLEWARE_RULES), not by a decorator."""
    return JsonResponse(_inside(request, "site"))


urlpatterns = [
    path("room/", page, name="room"),
    path("room/welcome/", welcome),
    path("room/async/", page_async),
    path("room/done/", done),
    path("room/done-async/", done_async),
    path("room/done-by-header/", done_by_header),
    path("room/slow/", slow),
    path("room/stream/", stream),
    path("room/own-page/", own_page),
    path("room/raising/", raising),
    path("outside/", outside),
    path("outside-async/", outside_async),
    path("m/page/", middleware_page),
    path("m/health/", middleware_page),
    # Static files, served by Django here (gunicorn serves none): the queue page's script and style.
    re_path(r"^static/(?P<path>.*)$", serve, {"insecure": True}),
]
