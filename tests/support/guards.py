"""Shared set-up of the decorator, middleware and failure-policy tests."""

from __future__ import annotations

from typing import Any

from django_semaphore import get_semaphore, outcomes

MIDDLEWARE = "django_semaphore.middleware.SemaphoreMiddleware"

# "guarded" guards the views in tests/views.py; "sitewide" is a second
# semaphore for stacked middleware rules; "gated" is the live-server test's.
SURFACE_SEMAPHORES: dict[str, dict[str, Any]] = {
    "guarded": {"limit": 1, "lease": 30},
    "sitewide": {"limit": 5, "lease": 30},
    "gated": {"limit": 3, "lease": 30},
}


def declare(settings: Any, **overrides: dict[str, Any]) -> None:
    """Add the surface semaphores (``overrides`` replace options per name) to SEMAPHORES."""
    declared = {name: {**options, **overrides.get(name, {})} for name, options in SURFACE_SEMAPHORES.items()}
    settings.SEMAPHORES = {**settings.SEMAPHORES, **declared}


def with_middleware(settings: Any) -> None:
    """The surface semaphores plus the middleware, with no rules yet, and fresh outcome counts."""
    declare(settings)
    settings.MIDDLEWARE = [*settings.MIDDLEWARE, MIDDLEWARE]
    settings.SEMAPHORE_MIDDLEWARE_RULES = []
    outcomes.reset()


def used(name: str = "guarded", key: Any = None) -> int:
    return get_semaphore(name, key).status().used


def hold(name: str = "guarded", key: Any = None):
    """Take the only permit (limit 1) so the next request finds the semaphore full."""
    permit = get_semaphore(name, key).acquire(auto_renew=False)
    assert permit is not None
    return permit
