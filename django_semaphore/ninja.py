"""Django Ninja's operations guarded by a semaphore: ``semaphore(name)``, on one operation or on a router.

Ninja runs an operation (``Operation.run``) as: its auth, its throttles, the
parameters, the operation's function, the response. A guard in front of it
(the view decorator on Ninja's URL, the middleware) sees a bearer or API-key
client as anonymous. This one takes its permit where the function is called,
after all of that: ``key="user"`` sees the user Ninja's auth gave
(``request.auth`` when it is a user, else ``request.user``), and a request
Ninja's own rate throttles refused never takes a permit.

It guards two things of each operation: the function (the permit, and a
refusal raised as ``SemaphoreRefused``, an ``HttpError`` the API's
exception handlers render in its format) and ``run`` (the response:
``Retry-After`` and the rate-limit fields on a refusal, the permits held
until the response is closed, streams included, and given back when an
error leaves it). So it goes where Ninja passes it ``run``::

    @api.get("/items")
    @semaphore("api")                                   # one operation
    def items(request): ...

    router.add_decorator(semaphore("api"), mode="view")  # every operation of a router (or of the API)

``add_decorator``'s default mode hands over the function alone, without
``run``: it is refused with a ``TypeError`` that says so.

Needs Django Ninja: ``pip install "django-semaphore[ninja]"``. Nothing else in
this package imports this module.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from functools import wraps
from typing import Any, TypeVar

from asgiref.sync import iscoroutinefunction
from django.core.exceptions import ImproperlyConfigured
from django.http import HttpRequest

from .core.redis_keys import check_name
from .exceptions import BackendUnavailable, SemaphoreFull
from .web.admission import Admission, Guarded, aadmit, admit
from .web.holding import AReleasedOnError, ReleasedOnError, afinish, arelease_all, finish, release_all
from .web.responses import answered_refusal, refusal_detail, refusal_status

try:
    from ninja.decorators import decorate_view
    from ninja.errors import HttpError
    from ninja.operation import Operation
except ImportError as exc:  # pragma: no cover - the message is the point
    raise ImportError('django_semaphore.ninja needs Django Ninja: pip install "django-semaphore[ninja]"') from exc

__all__ = ["SemaphoreRefused", "semaphore", "user_of"]

F = TypeVar("F", bound=Callable[..., Any])
Function = Callable[..., Any]
# The admissions of one request, kept on it from the outermost guarded run to its response.
_HELD = "_semaphore_ninja_held"
# On a guarded function: the guards it carries, so that one applied again (a cloned operation) is not doubled.
_GUARDS = "_semaphore_ninja_guards"
USE_VIEW_MODE = (
    "semaphore() guards an operation's run, which Ninja passes to decorators in mode='view': put it under "
    "@api.get(...) (or @router.get(...)), or add it with add_decorator(semaphore(...), mode='view')."
)


class SemaphoreRefused(HttpError):
    """A refusal in Ninja's terms: the semaphore's status (503 or 429), ``retry_after`` its Retry-After.

    ``semaphore_exception`` is the ``SemaphoreFull`` (or, for ``on_error:
    "deny"`` during an outage, the ``BackendUnavailable``) it stands for.
    """

    def __init__(self, exception: SemaphoreFull | BackendUnavailable, retry_after: int) -> None:
        super().__init__(refusal_status(exception), refusal_detail(exception))
        self.retry_after = retry_after
        self.semaphore_exception = exception


def _is_user(candidate: Any) -> bool:
    return getattr(candidate, "is_authenticated", False) is True and getattr(candidate, "pk", None) is not None


def user_of(request: HttpRequest) -> Any:
    """The user a Ninja operation serves, for the ``"user"`` and ``"user_or_ip"`` keys.

    ``request.auth`` when Ninja's auth returned a user, else ``request.user``
    (a session user). An auth that returned something else (a token, a key
    object) names nobody these keys can tell apart: that is refused with
    ``ImproperlyConfigured`` rather than counted as anonymous, which the
    user keys never limit.
    """
    auth = getattr(request, "auth", None)
    if _is_user(auth):
        return auth
    user = getattr(request, "user", None)
    if _is_user(user) or auth is None:
        return user
    raise ImproperlyConfigured(
        f"A user key cannot tell whose request this is: Ninja's auth returned a {type(auth).__name__}, not a "
        "user. Return the user from your auth's authenticate(), or give semaphore() key=, a function of the "
        "request (request.auth), as docs/guides/ninja.md shows."
    )


def semaphore(name: str, *, key: Any = None, wait: float | None = None, weight: int | None = None) -> Callable[[F], F]:
    """Guard a Ninja operation (or, through ``add_decorator(..., mode="view")``, each of a router's).

    ``key``, ``wait`` and ``weight`` default to the semaphore's options, as
    for ``@semaphore`` on views; a key function receives the request, with
    ``request.auth`` set. The admission is ``request.semaphore``.
    """
    check_name(name)
    guarded = Guarded(name, key, wait, weight, user_of=user_of)

    def decorator(target: F) -> F:
        operation = _operation_of(target)
        if operation is not None:
            _guard_function(operation, guarded)
            return _guarded_run(target, operation.is_async)  # type: ignore[return-value]
        if hasattr(target, "_ninja_operation"):  # an operation's function, handed over without its run
            raise TypeError(USE_VIEW_MODE)
        # Under @api.get: the operation does not exist yet; Ninja hands it its run when it does (and to each clone).
        guarded_later: F = decorate_view(decorator)(target)
        return guarded_later

    return decorator


def _operation_of(target: Callable[..., Any]) -> Operation | None:
    """The operation whose ``run`` ``target`` is (through decorators that kept ``__wrapped__``), or None."""
    unwrapped = inspect.unwrap(target)
    owner = getattr(unwrapped, "__self__", None)
    return owner if isinstance(owner, Operation) and unwrapped.__name__ == "run" else None


def _guard_function(operation: Operation, guarded: Guarded) -> None:
    """Have the operation's function take ``guarded``'s permit first (once: clones share the function)."""
    function = operation.view_func
    if guarded in getattr(function, _GUARDS, ()):
        return
    if inspect.isasyncgenfunction(function):
        raise TypeError(f"semaphore() cannot guard {function.__qualname__}: a stream of an async generator.")
    if iscoroutinefunction(function):

        @wraps(function)
        async def guarded_async(request: HttpRequest, *args: Any, **kwargs: Any) -> Any:
            admission = await aadmit(request, guarded)
            _held(request).append(admission)
            _raise_if_refused(admission)
            return await function(request, *args, **kwargs)

        operation.view_func = guarded_async
    else:

        @wraps(function)
        def guarded_sync(request: HttpRequest, *args: Any, **kwargs: Any) -> Any:
            admission = admit(request, guarded)
            _held(request).append(admission)
            _raise_if_refused(admission)
            return function(request, *args, **kwargs)

        operation.view_func = guarded_sync
    setattr(operation.view_func, _GUARDS, (*getattr(function, _GUARDS, ()), guarded))


def _held(request: HttpRequest) -> list[Admission]:
    held: list[Admission] | None = getattr(request, _HELD, None)
    if held is None:  # the function guarded, its run not: the permit would outlive the response
        raise ImproperlyConfigured(USE_VIEW_MODE)
    return held


def _raise_if_refused(admission: Admission) -> None:
    if admission.rejected:
        raise SemaphoreRefused(admission.exception(), max(admission.retry_after, 1))


def _guarded_run(run: Function, is_async: bool) -> Function:
    """``run``, answering for the admissions its function took: the outermost guarded run of a request does."""
    if is_async:

        @wraps(run)
        async def guarded_async_run(request: HttpRequest, *args: Any, **kwargs: Any) -> Any:
            if hasattr(request, _HELD):
                return await run(request, *args, **kwargs)
            held: list[Admission] = []
            setattr(request, _HELD, held)
            try:
                async with AReleasedOnError(lambda: arelease_all(held), lambda: release_all(held, posted=True)):
                    response = await run(request, *args, **kwargs)
                    # Retry-After on the API's answer; a refusal does no work: what it took goes back at once.
                    if answered_refusal(request, response, held):
                        await arelease_all(held)
                    return await afinish(request, response, held)
            finally:
                delattr(request, _HELD)

        return guarded_async_run

    @wraps(run)
    def guarded_sync_run(request: HttpRequest, *args: Any, **kwargs: Any) -> Any:
        if hasattr(request, _HELD):
            return run(request, *args, **kwargs)
        held: list[Admission] = []
        setattr(request, _HELD, held)
        try:
            with ReleasedOnError(lambda: release_all(held)):
                response = run(request, *args, **kwargs)
                if answered_refusal(request, response, held):  # as above
                    release_all(held)
                return finish(request, response, held)
        finally:
            delattr(request, _HELD)

    return guarded_sync_run
