"""The dashboard's system check: W005, the admin without ``django.contrib.staticfiles``.

Registered by ``django_semaphore/checks.py``.
"""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.core.checks import CheckMessage

from ..core.checks import warning


def check_staticfiles(app_configs: Any = None, **kwargs: Any) -> list[CheckMessage]:
    # Without the admin there is no dashboard, and the app serves no static file.
    installed = getattr(settings, "INSTALLED_APPS", ())
    if "django.contrib.admin" not in installed or "django.contrib.staticfiles" in installed:
        return []
    return [
        warning(
            5,
            "django.contrib.staticfiles is not in INSTALLED_APPS: the semaphore dashboard's CSS and JS are never "
            "collected, so they answer 404 unless your web server serves each app's static/ directory.",
            "Add 'django.contrib.staticfiles' to INSTALLED_APPS, set STATIC_ROOT and run "
            "'manage.py collectstatic' (or serve them with WhiteNoise).",
        )
    ]
