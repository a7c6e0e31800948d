"""Settings of the site behind waiting rooms that the system and browser tests serve with gunicorn.

The room's numbers come from the environment (the test that starts the
server sets them), so each test runs the room it needs: ``ROOM_LIMIT``,
``ROOM_LEASE``, ``ROOM_REFRESH``, ``ROOM_ABANDON``; ``ROOM_DB`` is a SQLite
file the workers share (users and sessions, for the bypass by staff and by
permission). ``REDIS_URL`` and ``SEMAPHORE_KEY_PREFIX`` are the test's.
"""

import os

from tests.settings import *  # noqa: F403
from tests.settings import MIDDLEWARE as SUITE_MIDDLEWARE

ROOT_URLCONF = "tests.support.room_site"
MIDDLEWARE = [*SUITE_MIDDLEWARE, "django_semaphore.middleware.SemaphoreMiddleware"]
DATABASES = {"default": {"ENGINE": "django.db.backends.sqlite3", "NAME": os.environ.get("ROOM_DB", ":memory:")}}


def room(**extra: object) -> dict:
    return {
        "limit": int(os.environ.get("ROOM_LIMIT", "5")),
        "lease": float(os.environ.get("ROOM_LEASE", "1")),
        "waiting_room": {
            "refresh": float(os.environ.get("ROOM_REFRESH", "1")),
            "abandon": float(os.environ.get("ROOM_ABANDON", "3")),
            # Every visitor of these tests comes from 127.0.0.1: no per-address bound (tests/faces/test_room_abuse.py
            # tries them).
            "client_places": None,
            "client_tickets_per_minute": None,
            "proof_of_work": int(os.environ.get("ROOM_PROOF", "0")) or None,
            **extra,
        },
    }


SEMAPHORES = {
    "room": room(),
    # The middleware's room: a health check and OPTIONS requests pass by; so do static files, always.
    "site": room(bypass_paths=[r"^/m/health/"], bypass_methods=["OPTIONS"]),
}
SEMAPHORE_MIDDLEWARE_RULES = [{"semaphore": "site", "path": r"^/(m|static)/"}]
