"""Make the room site's database (``ROOM_DB``) and log users in: ``python -m tests.support.room_users``.

Prints one JSON object: each user's name and the session key that logs it in
(a staff user, one with the bypass permission, one with neither), for a test
to send as the ``sessionid`` cookie to the site's gunicorn.
"""

from __future__ import annotations

import json
import os

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "tests.support.room_settings")

import django

django.setup()

from django.contrib.auth import BACKEND_SESSION_KEY, HASH_SESSION_KEY, SESSION_KEY  # noqa: E402
from django.contrib.auth.models import Permission, User  # noqa: E402
from django.contrib.sessions.backends.db import SessionStore  # noqa: E402
from django.core.management import call_command  # noqa: E402


def logged_in(user: User) -> str:
    session = SessionStore()
    session[SESSION_KEY] = str(user.pk)
    session[BACKEND_SESSION_KEY] = "django.contrib.auth.backends.ModelBackend"
    session[HASH_SESSION_KEY] = user.get_session_auth_hash()
    session.save()
    assert session.session_key is not None
    return session.session_key


def main() -> None:
    call_command("migrate", verbosity=0)
    staff = User.objects.create_user("staff", password="x", is_staff=True)
    allowed = User.objects.create_user("allowed", password="x")
    allowed.user_permissions.add(Permission.objects.get(codename="bypass_waiting_room"))
    plain = User.objects.create_user("plain", password="x")
    print(json.dumps({user.username: logged_in(user) for user in (staff, allowed, plain)}))


if __name__ == "__main__":
    main()
