"""Views guarded by the decorator or the middleware, for the surface tests.

Each view reports what it saw (its admission, the semaphore's occupancy
while it ran) as JSON, so tests assert on facts from inside the request.
"""

from __future__ import annotations

import asyncio
import io
import threading
import time

from asgiref.sync import async_to_sync, sync_to_async
from django.http import FileResponse, HttpRequest, HttpResponse, JsonResponse, StreamingHttpResponse
from django.utils.decorators import method_decorator
from django.utils.html import format_html
from django.views import View

from django_semaphore import get_semaphore
from django_semaphore.decorators import semaphore


def _seen(request: HttpRequest, name: str = "guarded") -> dict:
    admission = getattr(request, "semaphore", None)
    return {
        "outcome": admission.outcome if admission else None,
        "limited": admission.limited if admission else None,
        "used": get_semaphore(name).status().used,
        "semaphores": sorted(getattr(request, "semaphores", {})),
    }


@semaphore("guarded")
def guarded(request: HttpRequest) -> JsonResponse:
    return JsonResponse(_seen(request))


@semaphore("guarded")
async def guarded_async(request: HttpRequest) -> JsonResponse:
    status = await get_semaphore("guarded").astatus()
    return JsonResponse({"outcome": request.semaphore.outcome, "used": status.used})


@semaphore("guarded", block=False)
def unblocked(request: HttpRequest) -> JsonResponse:
    return JsonResponse(_seen(request))


@semaphore("guarded", raise_exception=True)
def raising(request: HttpRequest) -> JsonResponse:
    return JsonResponse(_seen(request))


@semaphore("guarded")
def failing(request: HttpRequest) -> HttpResponse:
    raise ValueError("the view broke")


def _chunks():
    yield from (b"one ", b"two ", b"three")


@semaphore("guarded")
def streaming(request: HttpRequest) -> StreamingHttpResponse:
    return StreamingHttpResponse(_chunks())


async def _achunks():
    for part in (b"one ", b"two ", b"three"):
        yield part


@semaphore("guarded")
async def streaming_async(request: HttpRequest) -> StreamingHttpResponse:
    return StreamingHttpResponse(_achunks())


@semaphore("guarded", key="header:X-Api-Key")
def held_open(request: HttpRequest, rest: str) -> StreamingHttpResponse:
    """Any path below it, keyed by a header: its permit stays held (path, label, key) until the stream is closed."""
    return StreamingHttpResponse(_chunks())


@semaphore("guarded", key="get:tenant")
def held_open_by_tenant(request: HttpRequest) -> StreamingHttpResponse:
    """Keyed by a query parameter: its permit stays held until the stream is closed."""
    return StreamingHttpResponse(_chunks())


@semaphore("guarded", key="header:X-Api-Key")
def header_keyed_quiet(request: HttpRequest) -> JsonResponse:
    """Keyed by a header, and touching Redis for nothing but its permit (an outage's tests)."""
    return _outcome(request)


@semaphore("guarded", key="ip")
def ip_held_open(request: HttpRequest) -> StreamingHttpResponse:
    """Keyed by the client's address: its permit stays held until the stream is closed."""
    return StreamingHttpResponse(_chunks())


@semaphore("guarded")
def file_download(request: HttpRequest) -> FileResponse:
    return FileResponse(io.BytesIO(b"file body"), filename="report.txt")


@method_decorator(semaphore("guarded", key="user_or_ip"), name="dispatch")
class GuardedView(View):
    def get(self, request: HttpRequest) -> JsonResponse:
        return JsonResponse(_seen(request))


@method_decorator(semaphore("guarded"), name="dispatch")
class GuardedAsyncView(View):
    async def get(self, request: HttpRequest) -> JsonResponse:
        status = await get_semaphore("guarded").astatus()
        return JsonResponse({"outcome": request.semaphore.outcome, "used": status.used})


def api_key(request: HttpRequest) -> str | None:
    """A key function: the tenant from a header, None (not limited) for internal calls."""
    tenant = request.headers.get("X-Tenant")
    return None if tenant == "internal" else tenant


async def api_key_async(request: HttpRequest) -> str | None:
    return api_key(request)


KEYED = {
    "ip": "ip",
    "user": "user",
    "user_or_ip": "user_or_ip",
    "header": "header:X-Api-Key",
    "get": "get:tenant",
    "callable": api_key,
    "dotted": "tests.support.views.api_key",
}


def _keyed(spec: object):
    @semaphore("guarded", key=spec)
    def view(request: HttpRequest) -> JsonResponse:
        return JsonResponse(_seen(request))

    return view


def _keyed_async(spec: object):
    @semaphore("guarded", key=spec)
    async def view(request: HttpRequest) -> JsonResponse:
        return JsonResponse({"outcome": request.semaphore.outcome})

    return view


keyed_views = {kind: _keyed(spec) for kind, spec in KEYED.items()}
keyed_async_views = {kind: _keyed_async(spec) for kind, spec in {**KEYED, "callable": api_key_async}.items()}


def plain(request: HttpRequest) -> JsonResponse:
    """Unguarded by any decorator: the middleware's rules decide."""
    return JsonResponse(_seen(request))


async def plain_async(request: HttpRequest) -> JsonResponse:
    admission = getattr(request, "semaphore", None)
    status = await get_semaphore("guarded").astatus()
    return JsonResponse({"outcome": admission.outcome if admission else None, "used": status.used})


def heavy(request: HttpRequest) -> JsonResponse:
    return JsonResponse(_seen(request))


heavy.heavy_work = True  # type: ignore[attr-defined]


def both(request: HttpRequest) -> JsonResponse:
    """Matched by two rules: reports what each semaphore holds while the view runs."""
    return JsonResponse({"guarded": get_semaphore("guarded").status().used, "sitewide": _sitewide_used()})


def _sitewide_used() -> int:
    return get_semaphore("sitewide").status().used


def full_inside(request: HttpRequest) -> HttpResponse:
    """Raises SemaphoreFull from inside the view (the permit is already taken by the test)."""
    with get_semaphore("guarded"):
        return HttpResponse("unreachable")


def health(request: HttpRequest) -> HttpResponse:
    return HttpResponse("ok")


def framer(request: HttpRequest) -> HttpResponse:
    """A page framing ``?src=`` from this same origin, as a clickjacking page would: for the browser tests."""
    page = '<!doctype html><title>framer</title><iframe src="{}" width="900" height="600"></iframe>'
    return HttpResponse(format_html(page, request.GET.get("src", "")))


def bypass_internal(request: HttpRequest) -> bool:
    return request.headers.get("X-Internal") == "yes"


async def bypass_internal_async(request: HttpRequest) -> bool:
    return request.headers.get("X-Internal") == "yes"


def bypass_superuser(request: HttpRequest) -> bool:
    return request.user.is_superuser


def too_many(request: HttpRequest, exception: Exception) -> HttpResponse:
    """A site's own answer (``SEMAPHORE_VIEW``): 429 and no Retry-After of its own."""
    return HttpResponse("slow down", status=429)


class Gate:
    """Holds requests inside a view until the test opens it; counts who got in."""

    def __init__(self) -> None:
        self.opened = threading.Event()
        self.entered = 0
        self.lock = threading.Lock()

    def enter(self) -> None:
        with self.lock:
            self.entered += 1
        self.opened.wait(timeout=20)


gate = Gate()


@semaphore("gated")
def gated(request: HttpRequest) -> HttpResponse:
    gate.enter()
    return HttpResponse("done")


def _outcome(request: HttpRequest) -> JsonResponse:
    admission = getattr(request, "semaphore", None)
    return JsonResponse({"outcome": admission.outcome if admission else None})


@semaphore("guarded")
def reported(request: HttpRequest) -> JsonResponse:
    """Touches Redis only through the decorator: for the outage tests."""
    return _outcome(request)


@semaphore("guarded")
async def reported_async(request: HttpRequest) -> JsonResponse:
    return _outcome(request)


@semaphore("guarded")
def reported_stream(request: HttpRequest) -> StreamingHttpResponse:
    return StreamingHttpResponse(_chunks())


def unguarded(request: HttpRequest) -> JsonResponse:
    """No decorator: the middleware's rules decide; reports their outcome."""
    return _outcome(request)


async def unguarded_async(request: HttpRequest) -> JsonResponse:
    return _outcome(request)


def exploding_key(request: HttpRequest) -> str:
    """A key function that fails: whatever was taken before it must be given back."""
    raise RuntimeError("the key function broke")


@semaphore("sitewide", weight=3)
def weighty(request: HttpRequest) -> JsonResponse:
    return _outcome(request)


@semaphore("sitewide", weight=3)
async def weighty_async(request: HttpRequest) -> JsonResponse:
    return _outcome(request)


@semaphore("guarded")
def no_response(request: HttpRequest) -> None:
    """A broken view that returns no response at all."""


async def too_many_async(request: HttpRequest, exception: Exception) -> HttpResponse:
    """An ``async def`` SEMAPHORE_VIEW."""
    return HttpResponse("slow down, async", status=429)


def _forever():
    while True:
        time.sleep(0.05)
        yield b"."


@semaphore("bounded")
def endless_stream(request: HttpRequest) -> StreamingHttpResponse:
    """A stream that never ends, as to a client that keeps reading a byte now and then."""
    return StreamingHttpResponse(_forever())


async def _aforever():
    while True:
        await asyncio.sleep(0.05)
        yield b"."


@semaphore("bounded")
async def endless_stream_async(request: HttpRequest) -> StreamingHttpResponse:
    return StreamingHttpResponse(_aforever())


class Work:
    """Sync work a request leaves running in its thread: started, then held until the test lets it end."""

    started = threading.Event()
    may_end = threading.Event()
    abandoned = threading.Event()  # the async view's await of it was cancelled
    running = 0

    @classmethod
    def reset(cls) -> None:
        cls.started, cls.may_end, cls.abandoned, cls.running = (
            threading.Event(),
            threading.Event(),
            threading.Event(),
            0,
        )

    @classmethod
    def run(cls) -> None:
        cls.running += 1
        cls.started.set()
        try:
            cls.may_end.wait(30)
        finally:
            cls.running -= 1


def working(request: HttpRequest) -> HttpResponse:
    """A sync view (the middleware's rules guard it): under ASGI it runs in the request's thread."""
    Work.run()
    return HttpResponse(b"done")


@semaphore("guarded")
async def working_async(request: HttpRequest) -> HttpResponse:
    """An async view whose work is sync, handed to a thread as Django's docs show (``sync_to_async``)."""
    try:
        await sync_to_async(Work.run)()
    except asyncio.CancelledError:
        Work.abandoned.set()
        raise
    return HttpResponse(b"done")


async def work_with_a_deadline(*, answers: bool = True) -> HttpResponse:
    """Sync work handed to the request's thread, given up on after 0.5 s: the work runs on, and the view answers
    504 (``answers``) or lets the timeout out (Django's 500)."""
    try:
        await asyncio.wait_for(sync_to_async(Work.run)(), timeout=0.5)
    except asyncio.TimeoutError:
        Work.abandoned.set()
        if not answers:
            raise
        return HttpResponse(b"too slow", status=504)
    return HttpResponse(b"done")


@semaphore("guarded")
async def working_async_with_a_deadline(request: HttpRequest) -> HttpResponse:
    """An async view that gives up on its sync work after a deadline and answers 504: the work runs on."""
    return await work_with_a_deadline()


@semaphore("guarded")
async def working_async_past_its_deadline(request: HttpRequest) -> HttpResponse:
    """The same, letting the timeout out of the view: Django answers 500 while the work runs on."""
    return await work_with_a_deadline(answers=False)


async def working_async_with_a_deadline_by_rule(request: HttpRequest) -> HttpResponse:
    """The same, not decorated: the middleware's rules guard it."""
    return await work_with_a_deadline()


def calls_a_guarded_async_view(request: HttpRequest) -> HttpResponse:
    """A sync view (under ASGI, in the request's thread) that runs a guarded async view through
    ``async_to_sync``: that thread waits for the view, whose guard must not wait for that thread."""
    return async_to_sync(guarded_async)(request)
