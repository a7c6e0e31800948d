"""A waiting room's ticket: the signed cookie that makes a browser the same visitor from request to request.

The ticket carries one random visitor id (128 bits), signed with Django's
signing and the room's own salt, so a ticket of one room is no ticket of
another, and nobody without the site's ``SECRET_KEY`` can make one. What is
not a valid ticket (none, forged, edited, another room's) is a new visitor:
a new id, at the back of the line. Copies of one ticket are one visitor, with
one place: the place belongs to the id, not to the browser.

The cookie is ``HttpOnly`` (no script reads it), ``SameSite=Lax`` (sent when a
visitor follows a link to the site, not with other sites' requests) and
``Secure`` when the request came over HTTPS (``request.is_secure()``, which
honours ``SECURE_PROXY_SSL_HEADER``).

Every answer that carries a ticket varies on ``Cookie``: it is one visitor's.
A cache that stored it (Django's per-site cache and ``cache_page`` store a
response that sets a cookie unless it varies on ``Cookie``; a shared proxy
alike) would hand that visitor's ticket, and its place inside, to everyone.
"""

from __future__ import annotations

import re
import secrets

from django.core import signing
from django.http import HttpRequest, HttpResponseBase
from django.utils.cache import patch_vary_headers

from ..core.room_options import RoomOptions

SALT = "django_semaphore.waiting_room"
VISITOR = re.compile(r"^[0-9a-f]{32}$")
# A visitor's token in Redis (its holder and waiter id), from its ticket's id.
TOKEN_PREFIX = "room-"


def _signer(name: str) -> signing.Signer:
    return signing.Signer(salt=f"{SALT}:{name}")


def new_visitor() -> str:
    """A visitor id nobody can guess: 128 random bits."""
    return secrets.token_hex(16)


def read(request: HttpRequest, name: str, options: RoomOptions) -> str | None:
    """The visitor id the request's ticket for room ``name`` carries; None without a valid one."""
    value = request.COOKIES.get(options.cookie)
    if not value:
        return None
    try:
        visitor = _signer(name).unsign(value)
    except signing.BadSignature:
        return None
    return visitor if VISITOR.match(visitor) else None


def token(visitor: str) -> str:
    """The visitor's token in the room's Redis keys."""
    return TOKEN_PREFIX + visitor


def give(response: HttpResponseBase, secure: bool, name: str, options: RoomOptions, visitor: str, lease: float) -> None:
    """Set (or refresh) the ticket on ``response`` (``secure``: the request came over HTTPS).

    It lives as long as a place can: a visit's lease after the last
    response, or an abandon time in line, with one refresh interval to
    spare, so a browser that comes back within either still has its place.
    """
    response.set_cookie(
        options.cookie,
        _signer(name).sign(visitor),
        max_age=int(max(lease, options.abandon) + options.refresh) + 1,
        path="/",
        secure=secure,
        httponly=True,
        samesite="Lax",
    )
    patch_vary_headers(response, ("Cookie",))
