"""A waiting room's own answers: the queue page, its JSON, and "come in" to the page's poll.

A visitor in line gets the room's ``status`` (503 by default) with
``Retry-After`` = the refresh interval in whole seconds, so a crawler reads
"come back later", and ``Cache-Control: no-store``, so no cache between the
site and the browser keeps one visitor's place for another. A client that
prefers JSON to HTML (the 503's negotiation) gets exactly
``{"position", "eta_seconds", "refresh_seconds", "updated_at"}``; a browser
gets the template (``django_semaphore/waiting_room.html``, or the room's
``template``), which works without JavaScript and, with it, asks again by
itself (``static/django_semaphore/js/waiting_room.js``).

The page's script sends ``Semaphore-Room: poll`` with its requests: when the
visitor's turn has come, such a request is answered ``204 No Content`` (the
visit begins, the view does not run), and the script loads the page again,
which the view now answers. Any other request of a visitor let in runs the
view.
"""

from __future__ import annotations

import json
import math
from datetime import datetime
from datetime import timezone as dt_timezone
from typing import Any

from django.http import HttpRequest, HttpResponse
from django.template import loader
from django.utils import timezone
from django.utils.cache import add_never_cache_headers
from django.utils.translation import gettext as _
from django.utils.translation import ngettext

from ..core.room_options import RoomOptions
from ..core.visits import IN_LINE, RoomReply

# The header of the page's own polls (request), and of a view ending the visit (response).
HEADER = "Semaphore-Room"
POLL, END = "poll", "end"
# On every answer to a visitor in line: "1" while admission is paused (the JSON keeps its four keys).
PAUSED_HEADER = "Semaphore-Room-Paused"
_OFFERED = ["text/html", "application/json"]


def prefers_json(request: HttpRequest) -> bool:
    """The client prefers JSON to HTML (what the 503 asks too: an app, a script, ``fetch``)."""
    return request.get_preferred_type(_OFFERED) == "application/json"


def is_poll(request: HttpRequest) -> bool:
    """A request of the queue page's own script, which loads the page itself once it is let in."""
    return request.headers.get(HEADER, "").strip().lower() == POLL


def eta_text(seconds: float | None) -> str:
    """An estimated wait as a person reads it: rounded up, never more precise than it is."""
    if seconds is None:
        return _("unknown")
    if seconds < 60:
        return _("less than a minute")
    minutes = math.ceil(seconds / 60)
    if minutes < 90:
        return ngettext("about %(count)d minute", "about %(count)d minutes", minutes) % {"count": minutes}
    hours = math.ceil(minutes / 60)
    return ngettext("about %(count)d hour", "about %(count)d hours", hours) % {"count": hours}


def updated_at(reply: RoomReply) -> datetime:
    """When the server answered (its own clock), as an aware datetime."""
    return datetime.fromtimestamp(reply.now_ms / 1000, dt_timezone.utc)


def pre_queued(reply: RoomReply, options: RoomOptions) -> bool:
    """The launch's pre-queue: before its opening, places are shuffled at the opening, so none is shown."""
    return bool(options.opens_ms) and reply.now_ms < options.opens_ms


def shown_place(reply: RoomReply, options: RoomOptions) -> int | None:
    """The visitor's place as the room shows it: people ahead + 1, 0 inside, None while it is not shown.

    A drawn place is never shown: in the pre-queue (drawn at the opening)
    nor in a random-order room (drawn for each newcomer), where a script
    reading its place would take tickets (its address's bound a minute) and
    keep the best-placed one, while a person gets one draw. Nor is there one
    to show for a visitor who holds none (a challenge, a refusal, not open yet).
    """
    if reply.inside:
        return 0
    if reply.code != IN_LINE or pre_queued(reply, options) or options.queueing == "random":
        return None
    return reply.position


def shown_eta(reply: RoomReply, options: RoomOptions) -> float | None:
    """The estimated wait the room shows a visitor in line (None: unknown, or nothing to show).

    In a random-order room, the wait of the middle of the line: what any
    place in it may expect, the same for every ticket (the visitor's own
    would tell its place).
    """
    if reply.inside or reply.code != IN_LINE or pre_queued(reply, options):
        return None
    if options.queueing == "random":
        return reply.eta_seconds((reply.waiting - 1) // 2, options.refresh)
    return reply.eta_seconds(reply.position - 1, options.refresh)


def _moment(ms: int) -> str:
    return datetime.fromtimestamp(ms / 1000, dt_timezone.utc).isoformat(timespec="seconds")


def status_document(reply: RoomReply, options: RoomOptions, work: str | None = None) -> dict[str, Any]:
    """The JSON a client waiting its turn reads: these four keys, and ``opens_at`` in a launch's room.

    ``position`` is null where the place is drawn (the pre-queue, a random-order room: ``shown_place``) and
    for a visitor who holds none yet (a challenge); ``eta_seconds`` is null in the pre-queue, and in a
    random-order room the middle of the line's.
    """
    document: dict[str, Any] = {
        "position": shown_place(reply, options),
        "eta_seconds": shown_eta(reply, options),
        "refresh_seconds": options.refresh,
        "updated_at": updated_at(reply).isoformat(timespec="seconds"),
    }
    if options.opens_ms:
        document["opens_at"] = _moment(options.opens_ms)
    if work is not None:
        # No place yet: it costs a proof of work (web/room_proof.py), sent with the next request.
        document["challenge"] = work
        document["difficulty"] = options.proof_of_work
    return document


def not_yet(request: HttpRequest, options: RoomOptions, reply: RoomReply) -> HttpResponse:
    """Before a launch's pre-queue: no place yet; 503 with Retry-After until it opens."""
    retry = max(math.ceil((options.prequeue_ms - reply.now_ms) / 1000), 1)
    document = {"prequeue_at": _moment(options.prequeue_ms), "opens_at": _moment(options.opens_ms)}
    if prefers_json(request):
        response = HttpResponse(json.dumps(document), content_type="application/json", status=503)
    else:
        body = loader.render_to_string(NOT_YET_TEMPLATE, document, request)
        response = HttpResponse(body, status=503)
    response["Retry-After"] = str(retry)
    add_never_cache_headers(response)
    return response


def queue_answer(
    request: HttpRequest, name: str, options: RoomOptions, reply: RoomReply, work: str | None = None
) -> HttpResponse:
    """The answer to a request of a visitor in line, or (``work``: its challenge) of one who must solve a proof
    of work to take a place (its ticket is set by the caller)."""
    document = status_document(reply, options, work)
    if prefers_json(request):
        response = HttpResponse(json.dumps(document), content_type="application/json", status=options.status)
    else:
        context = {
            "room": name,
            "position": document["position"] if document["position"] is not None else "-",
            "ahead": None if document["position"] is None else max(document["position"] - 1, 0),
            "eta_seconds": document["eta_seconds"],
            "eta": eta_text(document["eta_seconds"]),
            "refresh_seconds": options.refresh,
            "refresh_ms": max(int(options.refresh * 1000), 100),
            "refresh_whole": options.retry_after,
            "updated_at": document["updated_at"],
            "updated": timezone.localtime(updated_at(reply)),
            "paused": reply.paused,
            "poll_header": HEADER,
            "poll_value": POLL,
            "challenge": work or "",
            "difficulty": options.proof_of_work if work else 0,
        }
        body = loader.render_to_string(options.template, context, request)
        response = HttpResponse(body, status=options.status)
    response["Retry-After"] = str(options.retry_after)
    response[PAUSED_HEADER] = "1" if reply.paused else "0"
    add_never_cache_headers(response)
    return response


REFUSED_TEMPLATE = "django_semaphore/waiting_room_refused.html"
NOT_YET_TEMPLATE = "django_semaphore/waiting_room_not_yet.html"
# A refusal's status: too many requests from one client address.
REFUSED_STATUS = 429


def refused_after(options: RoomOptions, reason: str) -> int:
    """Seconds until the bound that refused a new place may allow one: a place of the client's lapses within
    an abandon time; its bucket of new places gains one in a minute / the bound."""
    if reason == "new" and options.client_tickets_per_minute:
        return max(math.ceil(60 / options.client_tickets_per_minute), 1)
    return max(math.ceil(options.abandon), 1)


def refusal(request: HttpRequest, options: RoomOptions, reason: str) -> HttpResponse:
    """The answer to a new place its client address may not take: 429, no place, ask again later.

    JSON: ``{"refused": "places" | "new", "retry_after_seconds": n}``; HTML:
    the template ``django_semaphore/waiting_room_refused.html``.
    """
    retry = refused_after(options, reason)
    if prefers_json(request):
        document = {"refused": reason, "retry_after_seconds": retry}
        response = HttpResponse(json.dumps(document), content_type="application/json", status=REFUSED_STATUS)
    else:
        context = {"reason": reason, "retry_after": retry}
        body = loader.render_to_string(REFUSED_TEMPLATE, context, request)
        response = HttpResponse(body, status=REFUSED_STATUS)
    response["Retry-After"] = str(retry)
    add_never_cache_headers(response)
    return response


def come_in() -> HttpResponse:
    """The answer to the page's poll once its visitor is let in: no content; the page loads itself again."""
    response = HttpResponse(status=204)
    add_never_cache_headers(response)
    return response
