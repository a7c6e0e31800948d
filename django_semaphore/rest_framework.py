"""REST framework's views guarded by a semaphore: ``SemaphoreThrottle``, in a view's ``throttle_classes``.

REST framework authenticates inside the view (``APIView.initial()``: the
authenticators, then the permissions, then the throttles), so a guard in
front of the view (the decorator on ``dispatch``, the middleware) sees a
token, JWT or API-key client as anonymous. A throttle runs after that:
``key="user"`` is REST framework's ``request.user``, and a key function
receives REST framework's ``Request``.

A throttle has no hook after the response, so the one that takes a permit
hands it to the view instance serving this request: its
``finalize_response`` passes it on to the response, which holds it until
the server has sent and closed it (web/holding.py, streaming included), and
its ``handle_exception`` gives it back when an error escapes the view.
Both are wrapped on that instance only, never on the class.

A refusal raises ``SemaphoreThrottled``, REST framework's ``Throttled``
with the semaphore's status (503, or 429 with ``"status": 429``): the
API's exception handler renders it in the API's format, with
``Retry-After``. REST framework has no async views (3.18): under ASGI
Django runs the view, and this throttle, in a thread.

Needs REST framework: ``pip install "django-semaphore[drf]"``. Nothing else in
this package imports this module.
"""

from __future__ import annotations

import weakref
from collections.abc import Mapping
from typing import Any

from django.core.exceptions import ImproperlyConfigured

from .core.semaphore import get_semaphore
from .exceptions import BackendUnavailable, SemaphoreFull
from .web.admission import Admission, Guarded, admit
from .web.conf import web_setting
from .web.holding import ReleasedOnError, finish, release_all
from .web.response_log import log_answer
from .web.responses import add_ratelimit_headers, refusal_detail, refusal_status

try:
    from rest_framework.exceptions import Throttled
    from rest_framework.request import Request
    from rest_framework.throttling import BaseThrottle
    from rest_framework.views import APIView
except ImportError as exc:  # pragma: no cover - the message is the point
    raise ImportError(
        'django_semaphore.rest_framework needs Django REST framework: pip install "django-semaphore[drf]"'
    ) from exc

__all__ = ["SCOPES_SETTING", "SemaphoreThrottle", "SemaphoreThrottled"]

# throttle_scope -> semaphore name, as ScopedRateThrottle maps a scope to a rate.
SCOPES_SETTING = "SEMAPHORE_THROTTLE_SCOPES"
# The attributes a view (or a subclass of the throttle) sets; the view's win.
NAME, KEY, WAIT, WEIGHT = "semaphore", "semaphore_key", "semaphore_wait", "semaphore_weight"
# The admissions of the request a view instance serves (the instance lives for one request).
_HELD = "_semaphore_held"


class SemaphoreThrottled(Throttled):
    """A refusal in REST framework's terms: the semaphore's status (503 or 429), ``wait`` its Retry-After.

    ``semaphore_exception`` is the ``SemaphoreFull`` (or, for ``on_error:
    "deny"`` during an outage, the ``BackendUnavailable``) it stands for.
    """

    default_code = "semaphore_full"

    def __init__(self, exception: SemaphoreFull | BackendUnavailable, wait: int) -> None:
        super().__init__(wait=wait, detail=refusal_detail(exception))
        self.status_code = refusal_status(exception)
        self.semaphore_exception = exception


class SemaphoreThrottle(BaseThrottle):
    """At most ``limit`` requests of a view at once (per partition): a permit held until the response is closed.

    The semaphore is the view's ``semaphore`` attribute, else the one
    ``SEMAPHORE_THROTTLE_SCOPES`` maps the view's ``throttle_scope`` to, else
    this class's ``semaphore`` (a subclass may set one); a view with none is
    not guarded. ``semaphore_key``, ``semaphore_wait`` and
    ``semaphore_weight`` (on the view, else on the class, else the
    semaphore's own options) choose the partition, the wait in line and the
    permits taken. The admission is ``request.semaphore``, as for views.
    """

    semaphore: str | None = None
    semaphore_key: Any = None
    semaphore_wait: float | None = None
    semaphore_weight: int | None = None

    def __init__(self) -> None:
        self._retry_after: int | None = None

    def allow_request(self, request: Request, view: APIView) -> bool:
        name = self.semaphore_for(view)
        if name is None:
            return True
        if get_semaphore(name).config.room is not None:
            raise ImproperlyConfigured(f"Semaphore {name!r} is a waiting room, which guards pages, not API views.")
        guarded = Guarded(name, self._option(view, KEY), self._option(view, WAIT), self._option(view, WEIGHT))
        held = _held_by(view)
        admission = admit(request, guarded)
        held.append(admission)
        if admission.rejected:
            self._retry_after = max(admission.retry_after, 1)
            raise SemaphoreThrottled(admission.exception(), self._retry_after)
        return True

    def wait(self) -> float | None:
        """The seconds a refused request was asked to wait (its Retry-After); None after a grant."""
        return self._retry_after

    def semaphore_for(self, view: APIView) -> str | None:
        """The name of the semaphore guarding ``view`` (see the class), or None."""
        named = getattr(view, NAME, None)
        if isinstance(named, str):
            return named
        scope = getattr(view, "throttle_scope", None)
        scopes = web_setting(SCOPES_SETTING)
        if scope is not None and isinstance(scopes, Mapping) and isinstance(scopes.get(scope), str):
            return str(scopes[scope])
        return self.semaphore

    def _option(self, view: APIView, attribute: str) -> Any:
        value = getattr(view, attribute, None)
        return getattr(self, attribute) if value is None else value


def _held_by(view: APIView) -> list[Admission]:
    """The admissions of the request ``view`` serves; the first one sets up their release on every way out."""
    held: list[Admission] | None = view.__dict__.get(_HELD)
    if held is None:
        held = []
        setattr(view, _HELD, held)
        _release_with_the_response(view, held)
    return held


def _release_with_the_response(view: APIView, held: list[Admission]) -> None:
    """Wrap this view instance's ``finalize_response`` and ``handle_exception`` so that ``held`` goes back.

    The wrappers reach the view through a weak reference: the instance's own
    attributes must not keep it alive in a cycle.
    """
    cls = type(view)
    instance = weakref.ref(view)

    def finalize_response(request: Request, response: Any, *args: Any, **kwargs: Any) -> Any:
        with ReleasedOnError(lambda: release_all(held)):
            response = cls.finalize_response(_alive(instance), request, response, *args, **kwargs)
            add_ratelimit_headers(response, held)
            if any(admission.rejected for admission in held):
                release_all(held)  # a refusal does no work: what this request took goes back now
                log_answer(request._request, response)  # at SEMAPHORE_503_LOG_LEVEL, not Django's ERROR
            return finish(request._request, response, held)

    def handle_exception(error: Exception) -> Any:
        # An error REST framework does not turn into a response leaves the view: finalize_response never runs.
        with ReleasedOnError(lambda: release_all(held)):
            return cls.handle_exception(_alive(instance), error)

    setattr(view, "finalize_response", finalize_response)  # noqa: B010 - an instance attribute shadows the method
    setattr(view, "handle_exception", handle_exception)  # noqa: B010


def _alive(instance: weakref.ref[APIView]) -> APIView:
    view = instance()
    if view is None:  # pragma: no cover - the view is running: it is alive
        raise RuntimeError("The view serving this request is gone.")
    return view
