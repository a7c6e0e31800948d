"""Routes of the decorator and middleware tests (tests/views.py), under /surface/."""

from django.urls import path, re_path

from . import views

urlpatterns = [
    path("guarded/", views.guarded, name="guarded"),
    path("guarded-async/", views.guarded_async, name="guarded-async"),
    path("unblocked/", views.unblocked),
    path("raising/", views.raising),
    path("failing/", views.failing),
    path("streaming/", views.streaming),
    path("streaming-async/", views.streaming_async),
    path("file/", views.file_download),
    path("ip-held-open/", views.ip_held_open),
    path("tenant-held-open/", views.held_open_by_tenant),
    path("header-keyed-quiet/", views.header_keyed_quiet),
    re_path(r"^held-open/(?P<rest>[\s\S]+)$", views.held_open),  # any character, newlines too
    path("cbv/", views.GuardedView.as_view()),
    path("cbv-async/", views.GuardedAsyncView.as_view()),
    *[path(f"keyed/{kind}/", view) for kind, view in views.keyed_views.items()],
    *[path(f"keyed-async/{kind}/", view) for kind, view in views.keyed_async_views.items()],
    path("plain/", views.plain, name="plain"),
    path("plain-async/", views.plain_async, name="plain-async"),
    path("heavy/", views.heavy),
    path("both/", views.both, name="both"),
    path("full-inside/", views.full_inside),
    path("health/", views.health),
    path("framer/", views.framer),
    path("gated/", views.gated),
    path("reported/", views.reported),
    path("reported-async/", views.reported_async),
    path("reported-stream/", views.reported_stream),
    path("unguarded/", views.unguarded, name="unguarded"),
    path("endless/", views.endless_stream),
    path("endless-async/", views.endless_stream_async),
    path("unguarded-async/", views.unguarded_async, name="unguarded-async"),
    path("weighty/", views.weighty),
    path("weighty-async/", views.weighty_async),
    path("no-response/", views.no_response),
]
