"""The admin dashboard's addresses, and staff users with its permissions, for the tests that log in."""

from __future__ import annotations

from django.contrib.auth.models import Permission, User
from django.urls import reverse

PREFIX = "admin:django_semaphore_semaphoredashboard_"


def url(view: str, *args: str) -> str:
    return reverse(PREFIX + view, args=args)


def staff(username: str, *codenames: str) -> User:
    user = User.objects.create_user(username, password="pw", is_staff=True)
    user.user_permissions.add(*Permission.objects.filter(codename__in=codenames))
    return user
