"""A request's visit of a waiting room: who passes by, which visitor it is, and what it is answered.

``web/admission.py`` asks here for a room's semaphore instead of taking a
permit: ``bypassed`` (static files, the room's paths and methods, staff and
users with its permission: neither queued nor counted), then ``visit`` (the
request's ticket read, its visitor's request run on the room: core/visits.py).
The ``Visit`` it returns is what the request carries (``request.semaphore.room``):

- inside, the view runs; at the end of the response the visit is renewed
  (``lease`` from then) or, if the view sent ``Semaphore-Room: end`` or called
  ``end_visit``, ended, so the next in line is let in. The header is taken off
  before the response leaves;
- in line, the room answers (``answer``: the queue page or its JSON, web/room_page.py);
- a poll of the queue page's script whose visitor was just let in gets "come
  in" (204) instead of the view.

Every answer to a room's request carries its ticket (web/room_tickets.py),
set or refreshed.
"""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any
from urllib.parse import urlparse

from asgiref.sync import sync_to_async
from django.conf import settings
from django.http import HttpRequest, HttpResponseBase
from django.utils.crypto import salted_hmac

from ..core import visits
from ..core.errors import BackendUnavailable
from ..core.failure_policy import agive_back, give_back
from ..core.permit import Permit
from ..core.redis_keys import hash_partition
from ..core.renewal import renewer
from ..core.room_options import SAFE_METHODS, RoomOptions
from ..core.semaphore import Semaphore, get_semaphore
from ..core.visits import RoomReply
from . import room_page, room_proof, room_tickets
from .partition_keys import client_ip
from .response_log import log_answer

if TYPE_CHECKING:
    from collections.abc import Iterable

logger = logging.getLogger("django_semaphore.requests")
LABEL_LIMIT = 200


@dataclass
class Visit:
    """One request's visit of one room: the visitor, what the room answered, and the visit's permit if inside."""

    name: str
    options: RoomOptions
    lease: float
    visitor: str
    reply: RoomReply
    permit: Permit | None = None
    poll: bool = False
    # The request came over HTTPS: its ticket is a Secure cookie.
    secure: bool = False
    # The visit ends with this response (Semaphore-Room: end), or ended already (end_visit).
    ending: bool = False
    # The request's method is a safe one (GET, HEAD...): it may not end a visit (ends_by_safe_method).
    safe: bool = False
    _dressed: bool = field(default=False, repr=False)
    _closed: bool = field(default=False, repr=False)

    @property
    def inside(self) -> bool:
        return self.reply.inside

    @property
    def position(self) -> int | None:
        """People ahead in line + 1; 0 when inside; None where the room shows no place (a drawn one, or none
        held: web/room_page.py's ``shown_place``), so a view's own page cannot show it either."""
        return room_page.shown_place(self.reply, self.options)

    @property
    def eta_seconds(self) -> float | None:
        return room_page.shown_eta(self.reply, self.options)

    @property
    def answers(self) -> bool:
        """The room answers the request itself, not the view: "come in" to the page's poll."""
        return self.poll and self.inside

    def answer(self, request: HttpRequest) -> HttpResponseBase:
        """The room's own answer: the queue page (or its JSON) in line, "come in" to a poll let in, or a refusal."""
        if self.inside:
            response: HttpResponseBase = room_page.come_in()
        elif self.reply.refused:
            response = room_page.refusal(request, self.options, self.reply.refused)
        elif self.reply.code == visits.NOT_YET:
            response = room_page.not_yet(request, self.options, self.reply)
        elif self.reply.code == visits.CHALLENGE:
            work = room_proof.challenge(self.name, self.visitor, self.options.proof_of_work)
            response = room_page.queue_answer(request, self.name, self.options, self.reply, work)
        else:
            response = room_page.queue_answer(request, self.name, self.options, self.reply)
        self.dress(response)
        log_answer(request, response)
        return response

    def dress(self, response: HttpResponseBase) -> None:
        """The ticket on the response; a view's ``Semaphore-Room: end`` read (and taken off) once."""
        if self._dressed:
            return
        self._dressed = True
        if response.has_header(room_page.HEADER):
            if response[room_page.HEADER].strip().lower() == room_page.END and not refused_by_method(self):
                self.ending = True
            del response[room_page.HEADER]
        room_tickets.give(response, self.secure, self.name, self.options, self.visitor, self.lease)

    def close(self) -> None:
        """The response is over: the visit runs ``lease`` from now, or ends (the next in line is let in).

        A poll the room answered itself ("come in") leaves the visit as it
        is: only requests the view answers keep a visit going.
        """
        permit = self._closing()
        if permit is None:
            return
        if self.ending:
            give_back(permit)  # an outage: retried from the background
            return
        try:
            permit.renew()
        except BackendUnavailable as exc:
            logger.warning("The visit of room %r could not be renewed at the end of a response: %s", self.name, exc)

    async def aclose(self) -> None:
        permit = self._closing()
        if permit is None:
            return
        if self.ending:
            await agive_back(permit)
            return
        try:
            await permit.arenew()
        except BackendUnavailable as exc:
            logger.warning("The visit of room %r could not be renewed at the end of a response: %s", self.name, exc)

    def _closing(self) -> Permit | None:
        """The visit's permit, once, and no longer renewed from the background; None when there is nothing to do."""
        if self._closed or self.permit is None:
            return None
        self._closed = True
        renewer.forget(self.permit)
        if self.answers and not self.ending:
            return None
        return None if self.permit.released else self.permit

    def forget(self) -> None:
        """A response dropped unclosed, or a hung Redis: stop renewing; the visit ends a lease after its last."""
        if self.permit is not None:
            renewer.forget(self.permit)

    def _to_end(self) -> Permit | None:
        """The permit ending the visit gives back: None when it is not inside, or the method is a safe one."""
        if refused_by_method(self):
            return None
        self.ending = True
        if self.permit is None or self.permit.released:
            return None
        renewer.forget(self.permit)
        return self.permit

    def end_now(self) -> bool:
        """End the visit at once (``end_visit``): True if it was inside (never on a safe method)."""
        permit = self._to_end()
        if permit is not None:
            give_back(permit)
        return permit is not None

    async def aend_now(self) -> bool:
        permit = self._to_end()
        if permit is not None:
            await agive_back(permit)
        return permit is not None


# Rooms whose visit a safe method was refused the end of, in this process: the warning is logged once each.
_warned: set[str] = set()


def refused_by_method(visit: Visit | str, method: str | None = None) -> bool:
    """A request of a safe method (GET, HEAD...) may not end a visit: True (and one warning) when it tried.

    Such a request may come from another site: a link, a redirect or a
    top-level navigation carries the ticket (SameSite=Lax), so a page
    anywhere could end a visitor's visit. A visit ends on a POST, which
    Django's CSRF protection guards (the guide's examples do so).
    """
    name = visit if isinstance(visit, str) else visit.name
    safe = (method or "GET").upper() in SAFE_METHODS if isinstance(visit, str) else visit.safe
    if not safe:
        return False
    if name not in _warned:
        _warned.add(name)
        logger.warning(
            "A %s request tried to end a visit of waiting room %r: visits end only on POST (or another method "
            "Django's CSRF protection guards), since any site can make a browser send a GET. Nothing ended.",
            method or "GET",
            name,
        )
    return True


# -- who passes by ----------------------------------------------------------------------------------------


def _static_prefix() -> str | None:
    """The path static files are served under here, if they are (a STATIC_URL on another host is not)."""
    url = getattr(settings, "STATIC_URL", None)
    if not url:
        return None
    parsed = urlparse(str(url))
    if parsed.netloc:
        return None
    path = parsed.path if parsed.path.startswith("/") else "/" + parsed.path
    return path if len(path) > 1 else None


def _passes_by_request(request: HttpRequest, options: RoomOptions) -> bool:
    """Static files, and the room's own paths and methods: no queue page ever needs them held."""
    static = _static_prefix()
    if static is not None and request.path.startswith(static):
        return True
    if request.method in options.bypass_methods:
        return True
    # Whole paths: "^/shop/health" must not let "/shop/healthz/private" through.
    return any(re.fullmatch(pattern, request.path_info) for pattern in options.bypass_paths)


def _passes_by_user(request: HttpRequest, options: RoomOptions) -> bool:
    """Staff, and users with the room's bypass permission (it reads the session and may query the database)."""
    user = getattr(request, "user", None)
    if user is None or not getattr(user, "is_authenticated", False):
        return False
    if options.bypass_staff and getattr(user, "is_staff", False):
        return True
    return options.bypass_permission is not None and bool(user.has_perm(options.bypass_permission))


def bypassed(request: HttpRequest, sem: Semaphore) -> bool:
    """The request passes the room by: neither queued nor counted."""
    options = _options(sem)
    return _passes_by_request(request, options) or _passes_by_user(request, options)


async def abypassed(request: HttpRequest, sem: Semaphore) -> bool:
    """``bypassed``, the user's part in a thread (the session and the permissions are in the database)."""
    options = _options(sem)
    if _passes_by_request(request, options):
        return True
    return await sync_to_async(_passes_by_user)(request, options)


def _options(sem: Semaphore) -> RoomOptions:
    options = sem.config.room
    if options is None:
        raise ValueError(f"Semaphore {sem.name!r} has no waiting room.")
    return options


# -- which visitor, and what the room says ---------------------------------------------------------------


def _asked(request: HttpRequest, sem: Semaphore) -> tuple[str, visits.VisitAsk]:
    """What a request asks the room: its visitor (its ticket's, or a new one), and for that visitor's token the
    label operators see, whether it renews a visit inside (the view answers it), its client address, hashed,
    its place in a shuffled line and whether it proved its work."""
    options = _options(sem)
    visitor = room_tickets.read(request, sem.name, options) or room_tickets.new_visitor()
    bounded = options.client_places is not None or options.client_tickets_per_minute is not None
    address = client_ip(request) if bounded else None
    return visitor, visits.VisitAsk(
        room_tickets.token(visitor),
        f"{request.method} {request.path}"[:LABEL_LIMIT],
        renew=not room_page.is_poll(request),
        client=None if address is None else hash_partition(f"ip:{address}"),
        shuffled=shuffled_place(sem.name, options, visitor),
        proven=bool(options.proof_of_work) and room_proof.verified(request, sem.name, visitor, options.proof_of_work),
    )


def shuffled_place(name: str, options: RoomOptions, visitor: str) -> int:
    """The place (1 to 2^40) a launch's pre-queue, or a random-order room, gives the visitor: a keyed hash of its
    ticket's id, with the site's SECRET_KEY and the room's opening. Nobody without the key can tell which tickets
    land ahead, so the fastest script wins nothing; a visitor keeps its place request after request. 0 without."""
    if not options.opens_ms and options.queueing != "random":
        return 0
    # SHA-256, named: Django 6 warns that its default (SHA-1) will change. A place is drawn once, when its visitor
    # joins, so workers of both sides of a deploy across this draw alike at random.
    digest = salted_hmac(
        f"django_semaphore.room_shuffle:{name}:{options.opens_ms}", visitor, algorithm="sha256"
    ).digest()
    return int.from_bytes(digest[:5], "big") + 1


def _visit(request: HttpRequest, sem: Semaphore, visitor: str, reply: RoomReply, permit: Permit | None) -> Visit:
    visit = Visit(
        sem.name,
        _options(sem),
        visits.visit_lease(sem),
        visitor,
        reply,
        permit,
        poll=room_page.is_poll(request),
        secure=request.is_secure(),
        safe=(request.method or "GET").upper() in SAFE_METHODS,
    )
    if permit is not None and not visit.answers:
        renewer.track(permit)  # a response longer than the lease keeps the visit alive until it is over
    return visit


def visit(request: HttpRequest, sem: Semaphore) -> Visit:
    """Run the request's visit of the room ``sem`` (one round trip)."""
    visitor, ask = _asked(request, sem)
    reply, permit = visits.visit(sem, ask)
    return _visit(request, sem, visitor, reply, permit)


async def avisit(request: HttpRequest, sem: Semaphore) -> Visit:
    visitor, ask = _asked(request, sem)
    reply, permit = await visits.avisit(sem, ask)
    return _visit(request, sem, visitor, reply, permit)


def dress(response: HttpResponseBase, rooms: Iterable[Visit | None]) -> None:
    """Every room visit of the request puts its ticket on the response (and reads a view's ``Semaphore-Room``)."""
    for room in rooms:
        if room is not None:
            room.dress(response)


def ticketed(request: HttpRequest, names: Iterable[str]) -> list[tuple[Semaphore, str]]:
    """The rooms (of ``names``) whose valid ticket the request carries, with the visitor's token in each."""
    found = []
    for name in names:
        sem = get_semaphore(name)
        if sem.config.room is None:
            continue
        visitor = room_tickets.read(request, name, sem.config.room)
        if visitor is not None:
            found.append((sem, room_tickets.token(visitor)))
    return found


def visits_of(request: HttpRequest) -> list[Visit]:
    """The room visits this request made (through the decorator or the middleware)."""
    seen: dict[str, Any] = getattr(request, "semaphores", None) or {}
    return [admission.room for admission in seen.values() if getattr(admission, "room", None) is not None]
