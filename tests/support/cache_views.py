"""Guarded views behind Django's cache framework, and middleware that breaks a response after its view.

``cache_page`` wraps ``@semaphore`` here (the cache outside the guard), on the
cache alias ``"pages"``, which each test points at LocMemCache or django-redis.
``BreaksAfterTheView`` raises from its ``process_response`` when the request
asks it to, as any later middleware may: the guarded response is then dropped
and never closed.
"""

from __future__ import annotations

from collections.abc import Callable

from django.core.exceptions import PermissionDenied
from django.http import HttpRequest, HttpResponse, HttpResponseBase, JsonResponse, StreamingHttpResponse
from django.template import engines
from django.template.response import SimpleTemplateResponse
from django.utils.deprecation import MiddlewareMixin
from django.views.decorators.cache import cache_page

from django_semaphore import get_semaphore
from django_semaphore.decorators import semaphore

PAGES = "pages"


class BreaksAfterTheView(MiddlewareMixin):
    """Breaks the response after the view returned, as the request's ``X-Break`` header says (sync and async alike).

    "error": raises a RuntimeError (a 500); "denied": raises PermissionDenied
    (a 403); "replaced": answers another response, leaving the view's unclosed.
    """

    def process_response(self, request: HttpRequest, response: HttpResponse) -> HttpResponse:
        how = request.headers.get("X-Break")
        if how == "error":
            raise RuntimeError("a later middleware broke the response")
        if how == "denied":
            raise PermissionDenied("a later middleware refused the response")
        if how == "replaced":
            return HttpResponse(b"another answer")
        return response


def _page(request: HttpRequest) -> JsonResponse:
    return JsonResponse({"path": request.get_full_path(), "used": get_semaphore("guarded").status().used})


@cache_page(60, cache=PAGES)
@semaphore("guarded")
def cached(request: HttpRequest) -> JsonResponse:
    return _page(request)


@cache_page(60, cache=PAGES)
@semaphore("guarded")
async def cached_async(request: HttpRequest) -> JsonResponse:
    status = await get_semaphore("guarded").astatus()
    return JsonResponse({"path": request.get_full_path(), "used": status.used})


@semaphore("guarded")
@cache_page(60, cache=PAGES)
def guard_outside_the_cache(request: HttpRequest) -> JsonResponse:
    return _page(request)


@semaphore("guarded")
def template(request: HttpRequest) -> SimpleTemplateResponse:
    """Rendered after the view returned, by Django's handler: inside the permit, and stored once rendered."""
    page = engines["django"].from_string("<p>{{ path }}</p>")
    return SimpleTemplateResponse(page, {"path": request.get_full_path()})


def _counted_while_rendered() -> SimpleTemplateResponse:
    """Rendered by Django's handler after the view returned; it says how many permits are held then."""
    used = get_semaphore("guarded").status
    return SimpleTemplateResponse(engines["django"].from_string("{{ used }}"), {"used": lambda: used().used})


@semaphore("guarded")
def counted_template(request: HttpRequest) -> SimpleTemplateResponse:
    return _counted_while_rendered()


@semaphore("guarded")
async def counted_template_async(request: HttpRequest) -> SimpleTemplateResponse:
    return _counted_while_rendered()


@semaphore("guarded")
def broken_template(request: HttpRequest) -> SimpleTemplateResponse:
    """Its rendering, by Django's handler after the view, raises (a URL that does not resolve)."""
    return SimpleTemplateResponse(engines["django"].from_string("{% url 'no-such-page' %}"))


@semaphore("guarded")
def unpicklable(request: HttpRequest) -> JsonResponse:
    """A response the cache cannot store for reasons of its own (something it carries cannot be pickled)."""
    response = _page(request)
    response.computed = lambda: None  # type: ignore[attr-defined]
    return response


uploads: list[object] = []  # the files the upload view was sent, for the test to look at once the request is over


@semaphore("guarded")
def upload(request: HttpRequest) -> HttpResponse:
    uploads.extend(request.FILES.values())
    return HttpResponse(b"stored")


def _parts() -> object:
    yield from (b"one ", b"two ", b"three")


@semaphore("guarded")
def stream(request: HttpRequest) -> StreamingHttpResponse:
    return StreamingHttpResponse(_parts())


async def _aparts() -> object:
    for part in (b"one ", b"two ", b"three"):
        yield part


@semaphore("guarded")
async def stream_async(request: HttpRequest) -> StreamingHttpResponse:
    return StreamingHttpResponse(_aparts())


@semaphore("guarded")
async def page_async(request: HttpRequest) -> HttpResponse:
    return HttpResponse(b"async page")


def unguarded_stream(request: HttpRequest) -> StreamingHttpResponse:
    """No decorator: the middleware's rules decide."""
    return StreamingHttpResponse(_parts())


def _broken_parts() -> object:
    yield b"one "
    raise RuntimeError("the stream broke half-way")


async def _abroken_parts() -> object:
    yield b"one "
    raise RuntimeError("the stream broke half-way")


@semaphore("guarded")
def broken_stream(request: HttpRequest) -> StreamingHttpResponse:
    """Its content raises after the first part: the body is over, sent in part."""
    return StreamingHttpResponse(_broken_parts())


@semaphore("guarded")
async def broken_stream_async(request: HttpRequest) -> StreamingHttpResponse:
    return StreamingHttpResponse(_abroken_parts())


@semaphore("guarded")
def unsendable_cookie(request: HttpRequest) -> HttpResponse:
    """A cookie Django's ASGI handler cannot encode (it sends cookies as ASCII): the sending raises."""
    response = HttpResponse(b"page")
    response.set_cookie("last_search", request.GET.get("q", "\u20ac"))
    return response


class SetsACookie:
    """Sync only (no async path): the middleware before it runs its sync path, in a thread, under ASGI."""

    sync_capable = True
    async_capable = False

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponseBase]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponseBase:
        response = self.get_response(request)
        response.set_cookie("last_search", "\u20ac")
        return response
