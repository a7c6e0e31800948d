"""Waiting rooms: ``"waiting_room": True`` on a ``SEMAPHORES`` entry, and ending a visit from a view.

A semaphore with a waiting room counts visitors, not requests: a visitor let
in stays inside while they keep making requests, and their visit ends
``lease`` seconds after their last response. A visitor who finds the room full
waits in a first-come, first-served line on a page that lets them in by
itself (docs/guides/waiting-room.md). The room guards views through the
decorator and the middleware's rules, like any semaphore.

A view ends its visitor's visit at once (the next in line is let in) with
``end_visit(request)``, or by answering with the header ``Semaphore-Room: end``
(taken off before the response leaves): after a purchase, a sign-out, the last
step of a form. ``end_visit`` also works outside the room (a "thank you" page
it does not guard): it reads the visitor's ticket there.
"""

from __future__ import annotations

from django.http import HttpRequest

from .core.conf import declared
from .core.room_options import has_room
from .core.visits import aend, end
from .web.room_page import END, HEADER
from .web.visits import Visit, refused_by_method, ticketed, visits_of

__all__ = ["END", "HEADER", "Visit", "aend_visit", "end_visit", "visit_of"]


def _room_names(name: str | None) -> list[str]:
    if name is not None:
        return [name]
    return [room for room, options in declared().items() if has_room(options)]


def visit_of(request: HttpRequest, name: str | None = None) -> Visit | None:
    """The visit this request made of room ``name`` (the first room when None), or None.

    ``visit.inside``, ``visit.position`` and ``visit.eta_seconds`` say where
    the visitor stands: a view behind ``@semaphore(..., block=False)`` can show
    its own page to a visitor in line.
    """
    return next((visit for visit in visits_of(request) if name is None or visit.name == name), None)


def end_visit(request: HttpRequest, name: str | None = None) -> bool:
    """End the visitor's visit of room ``name`` (of every room when None) now; True if one was inside.

    In a view the room guards, it ends the visit this request made (its
    response still carries the ticket); elsewhere, the visit the request's
    ticket names. The visitor's next request is a new visit: let in if there
    is room, else at the back of the line. Only a request of an unsafe method
    (POST...: Django's CSRF protection guards it) ends a visit: on a GET any
    site could end it, so nothing ends, False, and a warning is logged.
    """
    made = [visit for visit in visits_of(request) if name is None or visit.name == name]
    if made:
        return any([visit.end_now() for visit in made])
    found = ticketed(request, _room_names(name))
    return any([end(room, token) for room, token in found if not refused_by_method(room.name, request.method)])


async def aend_visit(request: HttpRequest, name: str | None = None) -> bool:
    """``end_visit`` for async views (on the asyncio client)."""
    made = [visit for visit in visits_of(request) if name is None or visit.name == name]
    if made:
        return any([await visit.aend_now() for visit in made])
    found = ticketed(request, _room_names(name))
    return any([await aend(room, token) for room, token in found if not refused_by_method(room.name, request.method)])
