"""The semaphore dashboard in the Django admin, under this app in the index.

Its changelist is the dashboard; the other pages are added in ``get_urls``,
each behind ``admin_site.admin_view`` (staff login, CSRF, no caching) and
``X-Frame-Options: DENY`` whatever the project's ``X_FRAME_OPTIONS``: a page
with one-click operator actions must never be framed (clickjacking). There
is nothing to add, change or delete: the rows are live Redis state.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from django.contrib import admin
from django.http import HttpRequest, HttpResponse
from django.urls import URLPattern, path
from django.utils import timezone
from django.views.decorators.clickjacking import xframe_options_deny

from ..models import SemaphoreDashboard
from ..permissions import VIEW
from . import room_views, views


# ModelAdmin[SemaphoreDashboard] fails at run time: Django's ModelAdmin is generic only in django-stubs
# (django-stubs-ext's monkeypatch makes it subscriptable, which an app cannot do to its users' Django).
@admin.register(SemaphoreDashboard)
class SemaphoreDashboardAdmin(admin.ModelAdmin):  # type: ignore[type-arg]
    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_view_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return request.user.has_perm(VIEW)

    def has_module_permission(self, request: HttpRequest) -> bool:
        return request.user.has_perm(VIEW)

    def changelist_view(self, request: HttpRequest, extra_context: dict[str, Any] | None = None) -> HttpResponse:
        return views.dashboard(self, request)

    def get_urls(self) -> list[URLPattern]:
        prefix = f"{self.opts.app_label}_{self.opts.model_name}"

        def page(view: Callable[..., HttpResponse]) -> Callable[..., HttpResponse]:
            def bound(request: HttpRequest, **kwargs: Any) -> HttpResponse:
                # One zone on every page: the site's (dashboard/clock.py), whatever zone a middleware activated.
                with timezone.override(timezone.get_default_timezone()):
                    return view(self, request, **kwargs)

            return xframe_options_deny(self.admin_site.admin_view(bound))

        return [
            path("", page(views.dashboard), name=f"{prefix}_changelist"),
            path("status.json", page(views.dashboard_json), name=f"{prefix}_json"),
            path("<str:name>/", page(views.detail), name=f"{prefix}_detail"),
            path("<str:name>/status.json", page(views.detail_json), name=f"{prefix}_detail_json"),
            path("<str:name>/release/", page(views.release), name=f"{prefix}_release"),
            path("<str:name>/limit/", page(views.limit), name=f"{prefix}_limit"),
            path("<str:name>/room/", page(room_views.room), name=f"{prefix}_room"),
        ]
