"""Times on the dashboard's pages: one zone, ``settings.TIME_ZONE``, named on the page.

Every time shown (a holder's start, when counting began, the charts' axes,
"Updated") is the server's clock in the site's zone, written by the server:
never the browser's local time next to it, which differs from the server's
as soon as an operator is elsewhere, and makes an incident's timeline lie.
"""

from __future__ import annotations

from datetime import datetime

from django.conf import settings
from django.utils import timezone

DATE_TIME = "%Y-%m-%d %H:%M:%S"
TIME = "%H:%M:%S"
MINUTES = "%H:%M"


def zone() -> str:
    """The zone's name as settings give it, for the page's label."""
    return str(getattr(settings, "TIME_ZONE", None) or "UTC")


def at(ms: int, form: str = DATE_TIME) -> str:
    """``ms`` (server clock, epoch milliseconds) in the site's zone."""
    return datetime.fromtimestamp(ms / 1000, timezone.get_default_timezone()).strftime(form)
