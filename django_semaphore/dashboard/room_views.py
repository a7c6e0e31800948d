"""The dashboard's waiting-room actions: let the next visitors in, queue every new one (or stop).

Posted from the room panel of a semaphore's page (admin/django_semaphore/room.html),
behind the same permission as releasing and limits, and, as those, answered
with a confirmation page unless ``confirm=yes`` (the page's script asks in
the browser instead). Pausing a room is the limit form's Pause.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from django.http import HttpRequest, HttpResponse, HttpResponseNotAllowed
from django.template.response import TemplateResponse
from django.utils.translation import gettext as _
from django.utils.translation import ngettext

from ..core.ascii_numbers import ascii_int
from ..core.conf import MAX_LIMIT
from ..ops import rooms
from ..permissions import RELEASE
from . import views
from .views import OUTAGES, BadRequest

if TYPE_CHECKING:
    from .views import DashboardAdmin


def room(model_admin: DashboardAdmin, request: HttpRequest, name: str) -> HttpResponse:
    """``let_in=N`` (the next N in line, past the limit) or ``queue_all=1|0``; one per post."""
    if request.method != "POST":
        return HttpResponseNotAllowed(["POST"])
    views._require(request, RELEASE)
    try:
        sem = views._target(name, None)
        if not rooms.is_room(sem):
            raise BadRequest(_("%(name)s has no waiting room.") % {"name": name})
        action, value = _action(request)
        back = views._back(model_admin, sem)
        if request.POST.get("confirm") != "yes":
            context = views._context(
                model_admin,
                request,
                _("Are you sure?"),
                sem=sem,
                action=action,
                value=value,
                room_url=views._url(model_admin, "room", name),
                back_url=back,
            )
            return TemplateResponse(request, "admin/django_semaphore/room_confirm.html", context)
        if action == "let_in":
            let_in, _figures = rooms.let_in(sem, value)
            message = ngettext(
                "%(count)d visitor of %(name)s let in from the line.",
                "%(count)d visitors of %(name)s let in from the line.",
                let_in,
            ) % {"count": let_in, "name": name}
        else:
            rooms.queue_all(sem, bool(value))
            if value:
                message = _("Every new visitor of %(name)s waits in line now.") % {"name": name}
            else:
                message = _("New visitors of %(name)s walk in again when there is room.") % {"name": name}
    except BadRequest as exc:
        return views._bad(request, str(exc))
    except OUTAGES as exc:
        return views._unavailable(model_admin, request, exc)
    return views._answer(request, back, message)


def _action(request: HttpRequest) -> tuple[str, int]:
    asked = [action for action in ("let_in", "queue_all") if action in request.POST]
    if len(asked) != 1:
        raise BadRequest(_("Give one of let_in or queue_all."))
    raw = request.POST[asked[0]]
    try:
        value = ascii_int(raw)
    except ValueError:
        value = -1
    if asked[0] == "queue_all":
        if value not in (0, 1):
            raise BadRequest(_("queue_all is 1 (on) or 0 (off)."))
        return "queue_all", value
    if not 1 <= value <= MAX_LIMIT:
        raise BadRequest(
            _("Let in a whole number of visitors from 1 to %(max)d, in the digits 0-9.") % {"max": MAX_LIMIT}
        )
    return "let_in", value
