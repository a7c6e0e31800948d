"""The answer to a request that found its semaphore full: 503 (or the semaphore's ``status``, 429) with Retry-After.

The view that builds it is, in order: the semaphore's ``view`` option,
``SEMAPHORE_VIEW``, or ``semaphore_full`` below. Each is called as
``view(request, exception)`` with the ``SemaphoreFull`` (or, for a
fail-closed semaphore during an outage, the ``BackendUnavailable``), and
may be an ``async def``. ``arespond`` runs a sync view in a thread, so a
view or template that reads ``request.user`` or the database works for
async views too. Every such answer carries ``Retry-After``, the deciding
semaphore's RateLimit fields (when enabled) and no other's, and is logged at
``SEMAPHORE_503_LOG_LEVEL``.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from http import HTTPStatus
from typing import TYPE_CHECKING, Any

from asgiref.sync import async_to_sync, iscoroutinefunction, sync_to_async
from django.http import HttpRequest, HttpResponse, HttpResponseBase
from django.template import loader
from django.utils.module_loading import import_string

from ..core.conf import STATUS_CHOICES, declared
from ..core.errors import BackendUnavailable, SemaphoreFull
from ..core.failure_policy import ERROR_RETRY_AFTER
from .conf import web_setting
from .response_log import log_answer

if TYPE_CHECKING:
    from .admission import Admission

TEMPLATE = "django_semaphore/503.html"
PROBLEM_JSON = "application/problem+json"
_OFFERED = ["text/html", "application/json", PROBLEM_JSON]

ErrorView = Callable[[HttpRequest, Exception], HttpResponseBase]
# Set on a semaphore's own 503: its RateLimit fields are the deciding semaphore's, final.
_DECIDED = "_semaphore_decided"


def retry_after(exception: Exception) -> int:
    if isinstance(exception, SemaphoreFull):
        return max(int(exception.retry_after), 1)
    return ERROR_RETRY_AFTER


def wants_json(request: HttpRequest) -> bool:
    """True when the client prefers JSON to HTML (an API client, ``fetch``)."""
    return request.get_preferred_type(_OFFERED) in ("application/json", PROBLEM_JSON)


def refusal_status(exception: Exception) -> int:
    """The status a refusal answers with: the semaphore's ``status`` (503 or 429) when it is full.

    An outage (``on_error: "deny"``) and a paused semaphore are the server's
    doing, not the client's, so they answer 503 whatever ``status`` says.
    """
    if not isinstance(exception, SemaphoreFull) or exception.paused:
        return 503
    options = declared().get(exception.name)
    status = options.get("status", 503) if isinstance(options, Mapping) else 503
    return status if status in STATUS_CHOICES else 503


def refusal_detail(exception: Exception) -> str:
    """What a refusal says to an API client, in one sentence; the same words in every face's format."""
    if isinstance(exception, BackendUnavailable):
        return "The service that limits concurrent requests is unavailable."
    if isinstance(exception, SemaphoreFull) and exception.paused:
        return "Requests like this one are paused for now."
    return "Too many requests like this one are running at once."


def semaphore_full(request: HttpRequest, exception: Exception) -> HttpResponse:
    """The default answer (503, or the semaphore's ``status``): problem+json (RFC 9457) for JSON clients, else
    the HTML template."""
    seconds = retry_after(exception)
    status = refusal_status(exception)
    if wants_json(request):
        title = HTTPStatus(status).phrase
        body = {"type": "about:blank", "title": title, "status": status, "detail": refusal_detail(exception)}
        response = HttpResponse(json.dumps({**body, "retry_after": seconds}), content_type=PROBLEM_JSON, status=status)
    else:
        context = {"retry_after": seconds, "exception": exception}
        response = HttpResponse(loader.render_to_string(TEMPLATE, context, request), status=status)
    response["Retry-After"] = str(seconds)
    return response


def _view_setting(name: str | None) -> Any:
    options = declared().get(name) if name else None
    if isinstance(options, Mapping) and options.get("view"):
        return options["view"]
    return web_setting("SEMAPHORE_VIEW")


def error_view(name: str | None) -> ErrorView:
    """The view answering for semaphore ``name`` (None: only ``SEMAPHORE_VIEW`` applies)."""
    chosen = _view_setting(name)
    if chosen is None:
        return semaphore_full
    view: ErrorView = import_string(chosen) if isinstance(chosen, str) else chosen
    return view


def respond(
    request: HttpRequest, exception: SemaphoreFull | BackendUnavailable, deciding: Admission | None = None
) -> HttpResponseBase:
    """Run the configured view for the semaphore that turned ``request`` away (``deciding``, when known).

    A waiting room answers for itself: the queue page, its JSON, or "come in" (web/visits.py).
    """
    if deciding is not None and deciding.room is not None:
        return _decided(deciding.room.answer(request))
    view = error_view(exception.name)
    response = async_to_sync(view)(request, exception) if iscoroutinefunction(view) else view(request, exception)
    return _answered(request, response, exception, deciding)


async def arespond(
    request: HttpRequest, exception: SemaphoreFull | BackendUnavailable, deciding: Admission | None = None
) -> HttpResponseBase:
    """``respond`` for async callers: an async view is awaited, a sync one runs in a thread."""
    if deciding is not None and deciding.room is not None:
        return _decided(await sync_to_async(deciding.room.answer)(request))  # the template may read request.user
    view = error_view(exception.name)
    if iscoroutinefunction(view):
        response = await view(request, exception)
    else:
        response = await sync_to_async(view)(request, exception)
    return _answered(request, response, exception, deciding)


def _decided(response: HttpResponseBase) -> HttpResponseBase:
    setattr(response, _DECIDED, True)
    return response


def _answered(
    request: HttpRequest, response: HttpResponseBase, exception: Exception, deciding: Admission | None
) -> HttpResponseBase:
    if not response.has_header("Retry-After"):
        response["Retry-After"] = str(retry_after(exception))
    _set_ratelimit_fields(response, [deciding] if deciding is not None else [])
    setattr(response, _DECIDED, True)
    log_answer(request, response)
    return response


def answered_refusal(request: HttpRequest, response: HttpResponseBase, admissions: Sequence[Admission]) -> bool:
    """Put the rate-limit fields on a response an API stack rendered, and Retry-After when a semaphore refused;
    True then, and the answer logged (at ``SEMAPHORE_503_LOG_LEVEL``, not Django's ERROR).

    The stack's exception handler rendered the refusal in the API's format
    (a site's own handler too), which may know nothing of Retry-After.
    """
    add_ratelimit_headers(response, admissions)
    refused = next((admission for admission in admissions if admission.rejected), None)
    if refused is None:
        return False
    if isinstance(response, HttpResponseBase) and not response.has_header("Retry-After"):
        response["Retry-After"] = str(max(refused.retry_after, 1))
    log_answer(request, response)
    return True


def add_ratelimit_headers(response: HttpResponseBase, admissions: Sequence[Admission]) -> None:
    """The IETF draft ``RateLimit-Policy`` / ``RateLimit`` fields, when ``SEMAPHORE_RATELIMIT_HEADERS``.

    One list member per semaphore that had something to say: its limit
    (``q``) in ``qu="concurrent-requests"``, the permits left (``r``), and on
    rejection the seconds to wait (``t``). Still a draft, so off by default.
    Members are added to those a guard further in set (a decorator inside
    the middleware), except on a semaphore's 503: that one names only the
    semaphore that decided, since a client choosing when to retry cares for
    no other (a dry run's, or a limit with room).
    """
    # Not a response at all (a view returning None): Django's own error says so, after the permit is back.
    if isinstance(response, HttpResponseBase) and not getattr(response, _DECIDED, False):
        _set_ratelimit_fields(response, admissions)


def _set_ratelimit_fields(response: HttpResponseBase, admissions: Sequence[Admission]) -> None:
    if not web_setting("SEMAPHORE_RATELIMIT_HEADERS"):
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
    for field, members in (("RateLimit-Policy", policies), ("RateLimit", states)):
        if members:
            response[field] = ", ".join([response[field], *members] if response.has_header(field) else members)
