"""A guarded request's body is read before its permit is asked for, so a slow sender holds none.

Under a threaded WSGI server with nothing buffering in front (gunicorn
``gthread`` or ``sync`` facing clients), Django is called once the headers have
arrived and reads the body from the socket only when something asks for it.
A guard that took its permit first would hold it for as long as the client
takes to send the body: at a byte a second, a handful of clients drain a
site-wide limit. So the body is read first, as far as Django would keep it in
memory anyway: ``Content-Length`` of at most ``DATA_UPLOAD_MAX_MEMORY_SIZE``
(Django's default, 2.5 MiB, when that setting is None).

Everything else is left to the view, exactly as without the guard: a
chunked body (no ``Content-Length``), one above the limit (reading
``request.body`` would raise ``RequestDataTooBig``, a 400, where a streaming or
file-upload view works), or a stream something already started to read.
Under ASGI, Django has read the whole body before the request exists, so
nothing is done there (docs/security.md, "Slow clients").
"""

from __future__ import annotations

from django.conf import settings
from django.http import HttpRequest

from ..core.ascii_numbers import ascii_int

# Django's own default for DATA_UPLOAD_MAX_MEMORY_SIZE: what is read ahead when a site set None (no limit).
DJANGO_DEFAULT_MEMORY_SIZE = 2_621_440


def read_ahead_limit() -> int:
    limit = getattr(settings, "DATA_UPLOAD_MAX_MEMORY_SIZE", DJANGO_DEFAULT_MEMORY_SIZE)
    return DJANGO_DEFAULT_MEMORY_SIZE if limit is None else int(limit)


def must_read_ahead(request: HttpRequest) -> bool:
    """A WSGI request whose whole body, of a declared length Django keeps in memory, is still on the socket.

    Cheap on purpose (a dict lookup first): it runs on every guarded request,
    and under ASGI it answers False at once.
    """
    meta = request.META
    if "wsgi.input" not in meta or hasattr(request, "_body") or getattr(request, "_read_started", True):
        return False
    try:
        length = ascii_int(meta.get("CONTENT_LENGTH") or "0")
    except ValueError:
        return False  # not a length Django would read either; the view sees the request as it came
    return 0 < length <= read_ahead_limit()


def read_ahead(request: HttpRequest) -> None:
    """Wait for the body here, before any permit is taken (``request.body`` keeps it for the view).

    A client that disconnects half-way raises ``UnreadablePostError`` here, as
    it would in the view, with no permit taken.
    """
    if must_read_ahead(request):
        request.body  # noqa: B018 - read for its effect: the body is now in memory
