"""A waiting room's static files: W011 and, with ``--deploy``, W012.

The queue page loads ``django_semaphore/js/waiting_room.js`` and its style
from ``STATIC_URL``. The page lets a visitor in without them (its own
refresh, which the script cancels when it runs), but without the script it
reloads on every refresh instead of updating in place. Under ``DEBUG = False``
Django serves no static file: they must be collected (``collectstatic``,
into ``STATIC_ROOT``) and served (the web server, WhiteNoise). Registered by
``django_semaphore/checks.py``; docs/guides/waiting-room.md#static-files says how.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from django.conf import settings
from django.core.checks import CheckMessage

from ..core.checks import warning
from ..core.room_options import has_room

STATIC_HINT = (
    "Add 'django.contrib.staticfiles' to INSTALLED_APPS, set STATIC_URL and STATIC_ROOT, run collectstatic "
    "and serve STATIC_ROOT at STATIC_URL (see the docs, guides/waiting-room.md#static-files)."
)


def _rooms() -> list[str]:
    raw = getattr(settings, "SEMAPHORES", None) or {}
    if not isinstance(raw, Mapping):
        return []
    return sorted(str(name) for name, options in raw.items() if has_room(options))


def check_room_static_files(app_configs: Any = None, **kwargs: Any) -> list[CheckMessage]:
    """W011: a room is declared, but its queue page's script and style are never collected."""
    rooms = _rooms()
    installed = getattr(settings, "INSTALLED_APPS", ())
    if not rooms or ("django.contrib.staticfiles" in installed and getattr(settings, "STATIC_URL", None)):
        return []
    return [
        warning(
            11,
            f"Waiting rooms {', '.join(rooms)}: django.contrib.staticfiles is not installed or STATIC_URL is unset, "
            "so the queue page's script (django_semaphore/js/waiting_room.js) and style are never collected: "
            "visitors still get in, by the page's own refresh, but the page reloads instead of updating in place.",
            STATIC_HINT,
        )
    ]


def check_room_static_root(app_configs: Any = None, **kwargs: Any) -> list[CheckMessage]:
    """W012 (--deploy): a room is declared and STATIC_ROOT is unset: collectstatic has nowhere to put the script."""
    rooms = _rooms()
    if not rooms or getattr(settings, "STATIC_ROOT", None):
        return []
    return [
        warning(
            12,
            f"Waiting rooms {', '.join(rooms)}: STATIC_ROOT is unset, so with DEBUG = False the queue page's script "
            "and style answer 404 unless your web server serves each app's static/ directory.",
            STATIC_HINT,
        )
    ]
