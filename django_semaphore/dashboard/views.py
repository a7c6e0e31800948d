"""The admin dashboard's pages: the overview, one semaphore, its JSON, and the operator's actions.

Every view is reached through ``SemaphoreDashboardAdmin.get_urls``, so the
admin has already checked staff login and CSRF; these add the app's own
permissions. A Redis outage renders the page with the error and status 503,
never a 500: the dashboard is what an operator opens when things are broken.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping
from datetime import datetime
from datetime import timezone as dt_timezone
from typing import TYPE_CHECKING, Any, Concatenate, ParamSpec, TypeAlias

from django.contrib import messages
from django.core.exceptions import PermissionDenied
from django.http import (
    Http404,
    HttpRequest,
    HttpResponse,
    HttpResponseNotAllowed,
    HttpResponseRedirect,
    JsonResponse,
)
from django.template.response import TemplateResponse
from django.urls import reverse
from django.utils import timezone
from django.utils.translation import gettext as _

from ..core.ascii_numbers import ascii_int
from ..core.conf import MAX_LIMIT
from ..core.errors import OUTAGE_ERRORS, is_refusal, misconfigured, reason
from ..core.replies import Holder
from ..core.safe_text import for_terminal
from ..core.semaphore import PAUSED_RETRY_AFTER, Semaphore, get_semaphore
from ..exceptions import BackendUnavailable, UnknownSemaphore
from ..ops.overview import (
    MAX_PARTITIONS,
    SCHEMA_VERSION,
    duration,
    expand,
    is_keyed,
    known_partition,
    overview,
    summary,
)
from ..ops.pausing import pause, resume
from ..permissions import RELEASE, VIEW
from ..web.usage import dry_run_only
from . import clock
from .chart import HEIGHT, WIDTH, utilisation_chart
from .incident import add_activity

if TYPE_CHECKING:
    from django.contrib.admin import ModelAdmin

    from ..models import SemaphoreDashboard

    # What every view is handed: dashboard/admin.py's SemaphoreDashboardAdmin (which imports this module).
    DashboardAdmin: TypeAlias = ModelAdmin[SemaphoreDashboard]

P = ParamSpec("P")
POLL_SECONDS = 3
# What the limit form may ask for; exactly one per post.
LIMIT_ACTIONS = ("limit", "clear", "pause", "resume")
# Enough to find any holder of one partition by token.
HOLDER_SEARCH = 100_000
# The engine turns every outage (a refusal such as OOM included) into
# BackendUnavailable; the raw classes cover any call made around it.
OUTAGES: tuple[type[Exception], ...] = (BackendUnavailable, *OUTAGE_ERRORS)


class BadRequest(Exception):
    """A form the page itself would never send; answered with 400 and the reason."""


def _require(request: HttpRequest, permission: str) -> None:
    if not request.user.has_perm(permission):
        raise PermissionDenied


def _wants_json(request: HttpRequest) -> bool:
    return "application/json" in request.headers.get("Accept", "")


def _url(model_admin: DashboardAdmin, view: str, *args: str) -> str:
    opts = model_admin.opts
    return reverse(f"admin:{opts.app_label}_{opts.model_name}_{view}", args=args)


def _target(name: str, partition: str | None) -> Semaphore:
    """The semaphore (or the one partition of it) a URL names; 404 for anything unknown."""
    try:
        sem = get_semaphore(name)
    except UnknownSemaphore as exc:
        raise Http404(str(exc)) from exc
    if not partition:
        return sem
    if sem.config.key is None:
        raise Http404(_("Semaphore %(name)s is not keyed.") % {"name": name})
    try:
        return known_partition(sem, partition)
    except LookupError as exc:
        raise Http404(str(exc)) from exc


def _level(utilisation: float) -> str:
    return "full" if utilisation >= 1 else "high" if utilisation >= 0.7 else "low"


def _paused(item: Mapping[str, object]) -> bool:
    """A pause is an override of 0; a keyed row's own limit is the settings', so it never reads as one."""
    return item["override"] == 0


def shown(value: object) -> str:
    """Text a client or a task chose (a key, a label, a task's name or id), as the page shows it.

    HTML escaping stops markup, not control characters: an ESC, a BEL, a CR
    or a right-to-left override would reach the page (and, through the live
    refresh, the DOM) as they are, and reorder or hide what the operator
    reads. They are shown escaped, as the commands show them.
    """
    return "" if value is None else for_terminal(value)


def _decorate(model_admin: DashboardAdmin, row: dict[str, Any]) -> dict[str, Any]:
    """Add what the page shows but monitoring scripts need not: display strings, links, chart points.

    ``paused`` (and the bar's grey ``level``) say plainly what a limit of 0
    means; ``clearable`` is an override other than a pause, which Resume ends.
    Every ``*_shown`` field is the raw one made safe to show (``shown``): the
    templates and the page's script display those, never the raw values.
    """
    row["key_shown"] = shown(row["key"])
    row["paused"] = _paused(row)
    row["clearable"] = row["override"] not in (None, 0)
    row["level"] = "paused" if row["paused"] else _level(row["utilisation"])
    row["dry_run"] = row["name"] in dry_run_only()
    row["utilisation_pct"] = round(row["utilisation"] * 100)
    row["bar_width"] = 100 if row["paused"] else min(row["utilisation_pct"], 100)  # a paused bar is all grey
    row["oldest_holder_age"] = duration(row["oldest_holder_age_s"])
    detail = _url(model_admin, "detail", row["name"])
    row["detail_url"] = detail + (f"?partition={row['partition']}" if row["partition"] else "")
    for part in row["busiest"]:
        part["key_shown"] = shown(part["key"])
        part["detail_url"] = f"{detail}?partition={part['partition']}"
        part["paused"] = _paused(part)
        part["level"] = "paused" if part["paused"] else _level(part["utilisation"])
        part["bar_width"] = 100 if part["paused"] else min(round(part["utilisation"] * 100), 100)
    for holder in row.get("holder_list", []):
        for field in ("key", "host", "label"):
            holder[f"{field}_shown"] = shown(holder[field])
        acquired = timezone.localtime(datetime.fromtimestamp(holder["acquired_at_ms"] / 1000, dt_timezone.utc))
        holder["acquired_at"] = acquired.strftime("%Y-%m-%d %H:%M:%S")
        holder["age"] = duration(holder["age_s"])
        holder["lease_left"] = duration(holder["lease_left_s"])
        holder["expiring"] = holder["lease_left_s"] < 1
        # A striped semaphore's fences are per stripe: (stripe, fence) is what a resource compares.
        holder["fence_shown"] = (
            str(holder["fence"]) if holder["stripe"] is None else f"{holder['stripe']}:{holder['fence']}"
        )
    for part in row.get("stripes") or []:
        part["level"] = "paused" if part["limit"] == 0 else _level(part["utilisation"])
        part["bar_width"] = 100 if part["limit"] == 0 else min(round(part["utilisation"] * 100), 100)
    if row.get("room"):
        _shown_room(row["room"])
    if "history" in row and row["now_ms"] is not None:
        row["chart"] = utilisation_chart(row["history"], row["limit"], row["now_ms"], row["used"], row["waiting"])
    return row


def _shown_room(room: dict[str, Any]) -> None:
    """A waiting room's figures as the card and the page show them: times as people read them."""

    def when(ms: int) -> str:
        return timezone.localtime(datetime.fromtimestamp(ms / 1000, dt_timezone.utc)).strftime("%Y-%m-%d %H:%M:%S")

    room["abandoned_since"] = when(room["since_ms"]["abandoned"])
    full = room.get("full_since_ms")
    room["full_since_shown"] = when(full) if full else _("not full")
    eta = room.get("eta_last_seconds")
    room["eta_last_shown"] = "-" if not room["waiting"] else _("unknown") if eta is None else duration(eta)
    for key in ("time_in_line", "time_inside"):
        p50, p95 = room.get(f"{key}_p50_s"), room.get(f"{key}_p95_s")
        room[f"{key}_shown"] = "-" if p50 is None else f"{duration(p50)} / {duration(p95)}"


def _unavailable(model_admin: DashboardAdmin, request: HttpRequest, exc: Exception) -> HttpResponse:
    if misconfigured(exc):
        message = _("The Redis connection is misconfigured: %(error)s") % {"error": reason(exc)}
    elif is_refusal(exc):
        message = _("Redis refused the command: %(error)s") % {"error": reason(exc)}
    else:
        message = _("Redis is unreachable: %(error)s") % {"error": reason(exc)}
    if _wants_json(request) or request.path.endswith(".json"):
        return JsonResponse({"error": message}, status=503)
    context = _context(model_admin, request, _("Semaphores"), semaphores=[], error=message)
    return TemplateResponse(request, "admin/django_semaphore/dashboard.html", context, status=503)


def _context(model_admin: DashboardAdmin, request: HttpRequest, title: str, **extra: Any) -> dict[str, Any]:
    return {
        **model_admin.admin_site.each_context(request),
        "opts": model_admin.opts,
        "title": title,
        "can_release": request.user.has_perm(RELEASE),
        "poll_seconds": POLL_SECONDS,
        "paused_retry_after": PAUSED_RETRY_AFTER,
        "chart_width": WIDTH,
        "chart_height": HEIGHT,
        "max_partitions": MAX_PARTITIONS,
        "dashboard_url": _url(model_admin, "changelist"),
        "time_zone": clock.zone(),
        **extra,
    }


def _shown_to(request: HttpRequest, rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Whole tokens only for staff who may release; others get the prefix, enough to tell holders apart.

    A token is the holder's credential (it releases and renews the permit
    through the Python API), so looking is no reason to hold it.
    """
    if not request.user.has_perm(RELEASE):
        for row in rows:
            for holder in row.get("holder_list", []):
                holder["token"] = None
    return rows


def _dashboard_rows(model_admin: DashboardAdmin) -> list[dict[str, Any]]:
    return add_activity([_decorate(model_admin, row) for row in overview(history=True)["semaphores"]])


def _reading(
    view: Callable[Concatenate[DashboardAdmin, HttpRequest, P], HttpResponse],
) -> Callable[Concatenate[DashboardAdmin, HttpRequest, P], HttpResponse]:
    """A page that only reads: open to those with the VIEW permission, and a Redis outage is its 503 page.

    Reading Redis is all these views do besides building the answer, so
    what an outage cuts short is the reading.
    """

    @functools.wraps(view)
    def read(model_admin: DashboardAdmin, request: HttpRequest, /, *args: P.args, **kwargs: P.kwargs) -> HttpResponse:
        _require(request, VIEW)
        try:
            return view(model_admin, request, *args, **kwargs)
        except OUTAGES as exc:
            return _unavailable(model_admin, request, exc)

    return read


@_reading
def dashboard(model_admin: DashboardAdmin, request: HttpRequest) -> HttpResponse:
    rows = _shown_to(request, _dashboard_rows(model_admin))
    context = _context(
        model_admin, request, _("Semaphores"), semaphores=rows, poll_url=_url(model_admin, "json"), error=None
    )
    return TemplateResponse(request, "admin/django_semaphore/dashboard.html", context)


@_reading
def dashboard_json(model_admin: DashboardAdmin, request: HttpRequest) -> HttpResponse:
    rows = _shown_to(request, _dashboard_rows(model_admin))
    return JsonResponse({"schema": SCHEMA_VERSION, "semaphores": rows, **_updated(rows)})


def _updated(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """When the answer was read, by the server's clock in the site's zone: the page's "Updated" says this time."""
    now_ms = max((row["activity"]["now_ms"] for row in rows), default=None)
    return {"updated_at": None if now_ms is None else clock.at(now_ms, clock.TIME), "time_zone": clock.zone()}


def _detail_row(model_admin: DashboardAdmin, sem: Semaphore) -> dict[str, Any]:
    return add_activity([_decorate(model_admin, summary(sem, holders=True, history=True))])[0]


@_reading
def detail(model_admin: DashboardAdmin, request: HttpRequest, name: str) -> HttpResponse:
    partition = request.GET.get("partition")
    sem = _target(name, partition)
    (row,) = _shown_to(request, [_detail_row(model_admin, sem)])
    json_url = _url(model_admin, "detail_json", name) + (f"?partition={partition}" if partition else "")
    title = _("Semaphore %(name)s") % {"name": name}
    if sem.partition:
        title = _("Semaphore %(name)s, key %(key)s") % {"name": name, "key": shown(sem.key)}
    context = _context(
        model_admin,
        request,
        title,
        row=row,
        semaphores=[row],
        poll_url=json_url,
        release_url=_url(model_admin, "release", name),
        limit_url=_url(model_admin, "limit", name),
        limit_form=not is_keyed(sem),
        room_url=_url(model_admin, "room", name),
    )
    return TemplateResponse(request, "admin/django_semaphore/detail.html", context)


@_reading
def detail_json(model_admin: DashboardAdmin, request: HttpRequest, name: str) -> HttpResponse:
    (row,) = _shown_to(request, [_detail_row(model_admin, _target(name, request.GET.get("partition")))])
    return JsonResponse({"schema": SCHEMA_VERSION, "semaphores": [row], **_updated([row])})


def _holder(sem: Semaphore, token: str) -> Holder:
    for holder in sem.status(HOLDER_SEARCH).holders:
        if holder.token == token:
            return holder
    raise Http404(_("No holder of %(name)s has token %(token)s.") % {"name": sem.name, "token": shown(token)})


def _answer(
    request: HttpRequest, back: str, message: str, status: int = 200, level: int = messages.SUCCESS
) -> HttpResponse:
    """JSON for the page's script, else a message and a redirect back, as admin actions do."""
    if _wants_json(request):
        return JsonResponse({"message": message, "ok": status == 200}, status=status)
    messages.add_message(request, level, message)
    return HttpResponseRedirect(back)


def _form_target(request: HttpRequest, name: str) -> Semaphore:
    return _target(name, request.POST.get("partition") or None)


def _back(model_admin: DashboardAdmin, sem: Semaphore) -> str:
    detail = _url(model_admin, "detail", sem.name)
    return f"{detail}?partition={sem.partition}" if sem.partition else detail


def release(model_admin: DashboardAdmin, request: HttpRequest, name: str) -> HttpResponse:
    """Force-release one holder (``token``) or all (``all=1``), after a confirmation step.

    Without ``confirm=yes`` the answer is a confirmation page; the page's
    script asks in the browser instead and posts the confirmed form.
    """
    if request.method != "POST":
        return HttpResponseNotAllowed(["POST"])
    _require(request, RELEASE)
    token, everyone = request.POST.get("token", ""), request.POST.get("all") == "1"
    if bool(token) == everyone:
        return _bad(request, _("Give either a token or all=1."))
    try:
        sem = _form_target(request, name)
        scope = expand(sem) if everyone else [sem]
        holder = None if everyone else _holder(sem, token)
        if request.POST.get("confirm") != "yes":
            context = _context(
                model_admin,
                request,
                _("Are you sure?"),
                sem=sem,
                holder=holder,
                holder_metadata=", ".join(
                    f"{shown(k)}={shown(v)}" for k, v in (holder.metadata if holder else {}).items()
                ),
                everyone=everyone,
                release_url=_url(model_admin, "release", name),
                back_url=_back(model_admin, sem),
            )
            return TemplateResponse(request, "admin/django_semaphore/release_confirm.html", context)
        if everyone:
            released = [t for part in scope for t in part.force_release_all()]
            message = _("Released %(count)d permit(s) of %(name)s.") % {"count": len(released), "name": name}
        elif sem.force_release(token):
            message = _("Released %(token)s of %(name)s.") % {"token": token[:8], "name": name}
        else:
            raise Http404(_("%(token)s was no longer held.") % {"token": shown(token)})
    except Http404 as exc:
        if _wants_json(request):
            return JsonResponse({"message": str(exc), "ok": False}, status=404)
        raise
    except OUTAGES as exc:
        return _unavailable(model_admin, request, exc)
    return _answer(request, _back(model_admin, sem), message)


def limit(model_admin: DashboardAdmin, request: HttpRequest, name: str) -> HttpResponse:
    """Change the runtime limit of one semaphore or key, after confirming.

    The form sends one of ``limit`` (set it), ``clear`` (drop the override),
    ``pause`` (a limit of 0) or ``resume`` (end a pause: see ``pausing.py``).
    As with ``release``: without ``confirm=yes`` the answer is a confirmation
    page, so no single click (on a page that framed this one, say) changes a limit.
    """
    if request.method != "POST":
        return HttpResponseNotAllowed(["POST"])
    _require(request, RELEASE)
    try:
        sem = _form_target(request, name)
        if is_keyed(sem):
            return _bad(request, _("Limits of a keyed semaphore are per key: open one key's page."))
        action, value = _limit_action(request)
        if request.POST.get("confirm") != "yes":
            return _limit_confirmation(model_admin, request, sem, action, value)
        message, changed = _change_limit(sem, action, value)
    except BadRequest as exc:
        return _bad(request, str(exc))
    except OUTAGES as exc:
        return _unavailable(model_admin, request, exc)
    if not changed:
        return _answer(request, _back(model_admin, sem), message, status=409, level=messages.WARNING)
    return _answer(request, _back(model_admin, sem), message)


def _limit_action(request: HttpRequest) -> tuple[str, int | None]:
    """Which change the form asks for, and the new limit when it sets one."""
    asked = [action for action in LIMIT_ACTIONS if action in request.POST]
    if len(asked) != 1:
        raise BadRequest(_("Give one of limit, clear, pause or resume."))
    action = asked[0]
    return action, _limit_value(request.POST["limit"]) if action == "limit" else None


def _change_limit(sem: Semaphore, action: str, value: int | None) -> tuple[str, bool]:
    """Do it; the message for the operator, and whether anything changed."""
    name = sem.name
    if action == "pause":
        pause(sem)
        return _("%(name)s is paused: nothing new is granted until it is resumed.") % {"name": name}, True
    if action == "resume":
        in_force = resume(sem)
        if in_force is None:
            return _("%(name)s is not paused; nothing changed.") % {"name": name}, False
        return _("%(name)s is resumed; its limit is %(limit)d again.") % {"name": name, "limit": in_force}, True
    in_force = sem.set_limit(value)
    if value is None:
        message = _("Override cleared; the limit of %(name)s is %(limit)d again.") % {"name": name, "limit": in_force}
    else:
        message = _("The limit of %(name)s is now %(limit)d.") % {"name": name, "limit": in_force}
    return message, True


def _limit_confirmation(
    model_admin: DashboardAdmin, request: HttpRequest, sem: Semaphore, action: str, value: int | None
) -> HttpResponse:
    subject = sem.name if not sem.partition else _("%(name)s, key %(key)s") % {"name": sem.name, "key": shown(sem.key)}
    context = _context(
        model_admin,
        request,
        _("Are you sure?"),
        sem=sem,
        subject=subject,
        action=action,
        value=value,
        limit_url=_url(model_admin, "limit", sem.name),
        back_url=_back(model_admin, sem),
    )
    return TemplateResponse(request, "admin/django_semaphore/limit_confirm.html", context)


def _limit_value(raw: str) -> int:
    """The form's limit: ASCII digits only ("\u0663" and "\uff13" would otherwise be 3)."""
    try:
        value = ascii_int(raw)
    except ValueError:
        value = 0
    if not 1 <= value <= MAX_LIMIT:
        raise BadRequest(
            _("A limit must be a whole number from 1 to %(max)d, in the digits 0-9; to stop new grants, use Pause.")
            % {"max": MAX_LIMIT}
        )
    return value


def _bad(request: HttpRequest, message: str) -> HttpResponse:
    if _wants_json(request):
        return JsonResponse({"message": message, "ok": False}, status=400)
    return HttpResponse(message, status=400, content_type="text/plain; charset=utf-8")
