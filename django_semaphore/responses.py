"""The answer to a request that found its semaphore full: 503 with Retry-After.

The view that builds it is, in order: the semaphore's ``view`` option,
``SEMAPHORE_VIEW``, or ``semaphore_full`` below. Each is called as
``view(request, exception)`` with the ``SemaphoreFull`` (or, for a
fail-closed semaphore during an outage, the ``BackendUnavailable``), and
may be an ``async def``. ``arespond`` runs a sync view in a thread, so a
view or template that reads ``request.user`` or the database works for
async views too.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from asgiref.sync import async_to_sync, iscoroutinefunction, sync_to_async
from django.http import HttpRequest, HttpResponse, HttpResponseBase
from django.template import loader
from django.utils.module_loading import import_string

from .conf import app_setting, declared
from .exceptions import BackendUnavailable, SemaphoreFull
from .failure import ERROR_RETRY_AFTER

if TYPE_CHECKING:
    from .admission import Admission

TEMPLATE = "django_semaphore/503.html"
PROBLEM_JSON = "application/problem+json"
_OFFERED = ["text/html", "application/json", PROBLEM_JSON]

ErrorView = Callable[[HttpRequest, Exception], HttpResponseBase]


def retry_after(exception: Exception) -> int:
    if isinstance(exception, SemaphoreFull):
        return max(int(exception.retry_after), 1)
    return ERROR_RETRY_AFTER


def wants_json(request: HttpRequest) -> bool:
    """True when the client prefers JSON to HTML (an API client, ``fetch``)."""
    return request.get_preferred_type(_OFFERED) in ("application/json", PROBLEM_JSON)


def semaphore_full(request: HttpRequest, exception: Exception) -> HttpResponse:
    """The default 503: problem+json (RFC 9457) for JSON clients, else the HTML template."""
    seconds = retry_after(exception)
    if wants_json(request):
        detail = (
            "The service that limits concurrent requests is unavailable."
            if isinstance(exception, BackendUnavailable)
            else "Too many requests like this one are running at once."
        )
        body = {"type": "about:blank", "title": "Service Unavailable", "status": 503, "detail": detail}
        response = HttpResponse(json.dumps({**body, "retry_after": seconds}), content_type=PROBLEM_JSON, status=503)
    else:
        context = {"retry_after": seconds, "exception": exception}
        response = HttpResponse(loader.render_to_string(TEMPLATE, context, request), status=503)
    response["Retry-After"] = str(seconds)
    return response


def _view_setting(name: str | None) -> Any:
    options = declared().get(name) if name else None
    if isinstance(options, Mapping) and options.get("view"):
        return options["view"]
    return app_setting("SEMAPHORE_VIEW")


def error_view(name: str | None) -> ErrorView:
    """The view answering for semaphore ``name`` (None: only ``SEMAPHORE_VIEW`` applies)."""
    chosen = _view_setting(name)
    if chosen is None:
        return semaphore_full
    return import_string(chosen) if isinstance(chosen, str) else chosen


def respond(request: HttpRequest, exception: SemaphoreFull | BackendUnavailable) -> HttpResponseBase:
    """Run the configured view; make sure the answer carries Retry-After."""
    view = error_view(exception.name)
    response = async_to_sync(view)(request, exception) if iscoroutinefunction(view) else view(request, exception)
    return _with_retry_after(response, exception)


async def arespond(request: HttpRequest, exception: SemaphoreFull | BackendUnavailable) -> HttpResponseBase:
    """``respond`` for async callers: an async view is awaited, a sync one runs in a thread."""
    view = error_view(exception.name)
    if iscoroutinefunction(view):
        response = await view(request, exception)
    else:
        response = await sync_to_async(view)(request, exception)
    return _with_retry_after(response, exception)


def _with_retry_after(response: HttpResponseBase, exception: Exception) -> HttpResponseBase:
    if not response.has_header("Retry-After"):
        response["Retry-After"] = str(retry_after(exception))
    return response


def add_ratelimit_headers(response: HttpResponseBase, admissions: Sequence[Admission]) -> None:
    """The IETF draft ``RateLimit-Policy`` / ``RateLimit`` fields, when ``SEMAPHORE_RATELIMIT_HEADERS``.

    One list member per semaphore that had something to say: its limit
    (``q``) in ``qu="concurrent-requests"``, the permits left (``r``), and on
    rejection the seconds to wait (``t``). Still a draft, so off by default.
    """
    if not app_setting("SEMAPHORE_RATELIMIT_HEADERS"):
        return
    policies, states = [], []
    for admission in admissions:
        attempt = admission.attempt
        if attempt is None:
            continue
        policies.append(f'"{admission.name}";q={attempt.limit};qu="concurrent-requests"')
        remaining = max(attempt.limit - attempt.used, 0)
        reset = f";t={attempt.retry_after}" if attempt.permit is None else ""
        states.append(f'"{admission.name}";r={remaining}{reset}')
    if policies:
        response["RateLimit-Policy"] = ", ".join(policies)
        response["RateLimit"] = ", ".join(states)
