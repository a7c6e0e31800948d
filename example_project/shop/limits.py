"""The middleware's bypass predicate (``SEMAPHORE_MIDDLEWARE_BYPASS``)."""

from django.http import HttpRequest


def is_superuser(request: HttpRequest) -> bool:
    """Operators are never turned away, even while the API is shedding load."""
    user = getattr(request, "user", None)
    return bool(user is not None and user.is_superuser)
