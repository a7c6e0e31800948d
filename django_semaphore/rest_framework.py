"""REST framework's views guarded by a semaphore: ``SemaphoreThrottle``, in a view's ``throttle_classes``.

REST framework authenticates inside the view (``APIView.initial()``: the
authenticators, then the permissions, then the throttles), so a guard in
front of the view (the decorator on ``dispatch``, the middleware) sees a
token, JWT or API-key client as anonymous. A throttle runs after that:
``key="user"`` is REST framework's ``request.user``, and a key function
receives REST framework's ``Request``.

REST framework asks every throttle of the view, even after one said no,
and refuses only once all were asked. So ``allow_request`` takes no permit:
it notes the semaphore, and the permit is asked for when the handler
(``get``, ``post``, a viewset's action) is called, after every throttle let
the request in. A request another throttle refused never waits in line
for a permit nor holds one, wherever the throttles stand in the list.

A throttle has no hook after the response either: the view instance
serving this request is. Its handler takes the permits, its
``finalize_response`` passes them on to the response, which holds them
until the server has sent and closed it (web/holding.py, streaming
included), and its ``handle_exception`` gives them back when an error
escapes the view. All three are wrapped on that instance only, never on
the class.

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
from dataclasses import dataclass, field
from typing import Any

from django.core.exceptions import ImproperlyConfigured
from django.http import HttpRequest

from .core.semaphore import get_semaphore
from .exceptions import BackendUnavailable, SemaphoreFull
from .web.admission import Admission, Guarded, admit
from .web.conf import web_setting
from .web.holding import ReleasedOnError, finish, release_all
from .web.partition_keys import user_key
from .web.responses import answered_refusal, refusal_detail, refusal_status

try:
    from rest_framework.exceptions import Throttled
    from rest_framework.request import Request
    from rest_framework.throttling import BaseThrottle
    from rest_framework.views import APIView
except ImportError as exc:  # pragma: no cover - the message is the point
    raise ImportError(
        'django_semaphore.rest_framework needs Django REST framework: pip install "django-semaphore[drf]"'
    ) from exc

__all__ = ["SCOPES_SETTING", "SemaphoreThrottle", "SemaphoreThrottled", "user_of"]

# throttle_scope -> semaphore name, as ScopedRateThrottle maps a scope to a rate.
SCOPES_SETTING = "SEMAPHORE_THROTTLE_SCOPES"
# The attributes a view (or a subclass of the throttle) sets; the view's win.
NAME, KEY, WAIT, WEIGHT = "semaphore", "semaphore_key", "semaphore_wait", "semaphore_weight"
# What the throttles asked of the request a view instance serves (the instance lives for one request).
_HELD = "_semaphore_guards"


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


def user_of(request: HttpRequest) -> Any:
    """The user a REST framework request serves, for the ``"user"`` and ``"user_or_ip"`` keys: ``request.user``.

    An authenticator that accepted credentials without naming a user
    (``(None, key)``, an anonymous user with ``request.auth`` set) leaves a
    request these keys cannot tell apart from another's: that is refused
    with ``ImproperlyConfigured`` rather than counted as anonymous, which
    the user keys never limit.
    """
    user, auth = getattr(request, "user", None), getattr(request, "auth", None)  # REST framework's Request
    if user_key(user) is None and auth is not None:
        raise ImproperlyConfigured(
            f"A user key cannot tell whose request this is: REST framework's authentication accepted a "
            f"{type(auth).__name__} naming no user. Return the user from your authenticator, or give the "
            "view a semaphore_key, a function of the request (request.auth), as docs/guides/rest-framework.md shows."
        )
    return user


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
        options = (self._option(view, KEY), self._option(view, WAIT), self._option(view, WEIGHT))
        guarded = Guarded(name, *options, user_of=user_of)
        _guards_of(view, request).asked.append((self, guarded))
        return True

    def admit(self, request: Request, guarded: Guarded, held: list[Admission]) -> None:
        """Take ``guarded``'s permit for ``request`` (into ``held``), or raise its refusal.

        Called as the handler starts, once every throttle of the view let the request in.
        """
        admission = admit(request, guarded)
        held.append(admission)
        if admission.rejected:
            self._retry_after = max(admission.retry_after, 1)
            raise SemaphoreThrottled(admission.exception(), self._retry_after)

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


@dataclass
class _Guards:
    """What the throttles asked of the request one view instance serves, and the admissions it holds."""

    asked: list[tuple[SemaphoreThrottle, Guarded]] = field(default_factory=list)
    held: list[Admission] = field(default_factory=list)


def _guards_of(view: APIView, request: Request) -> _Guards:
    """The guards of the request ``view`` serves; the first ask sets up the admission and the release."""
    guards: _Guards | None = view.__dict__.get(_HELD)
    if guards is None:
        guards = _Guards()
        setattr(view, _HELD, guards)
        _admit_with_the_handler(view, (request.method or "").lower(), guards)
        _release_with_the_response(view, guards.held)
    return guards


def _admit_with_the_handler(view: APIView, method: str, guards: _Guards) -> None:
    """Wrap this view instance's handler of ``method`` so that it takes the permits the throttles asked for first.

    The handler is what ``dispatch`` calls once ``initial()`` (authentication,
    permissions, every throttle) is through. A method the view has no handler
    for is answered 405 by REST framework, without work and so without a
    permit. A viewset's action (and Django's ``head``) is already the
    instance's own attribute; a method of the class is reached through a
    weak reference, as in ``_release_with_the_response``.
    """
    if method not in view.http_method_names or getattr(view, method, None) is None:
        return
    own = view.__dict__.get(method)
    cls = type(view)
    instance = weakref.ref(view)

    def admitted(request: Request, *args: Any, **kwargs: Any) -> Any:
        while guards.asked:
            throttle, guarded = guards.asked.pop(0)
            throttle.admit(request, guarded, guards.held)
        if own is not None:
            return own(request, *args, **kwargs)
        return getattr(cls, method)(_alive(instance), request, *args, **kwargs)

    setattr(view, method, admitted)


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
            if answered_refusal(request._request, response, held):  # Retry-After, whatever the handler rendered
                release_all(held)  # a refusal does no work: what this request took goes back now
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
