"""``@semaphore(name)``: at most ``limit`` requests run the view at once, site-wide.

Works on sync and async function views (async ones take their permit on the
asyncio client) and, through ``method_decorator``, on class-based views.
"""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Callable
from functools import wraps
from typing import Any

from asgiref.sync import iscoroutinefunction
from django.http import HttpRequest, HttpResponseBase

from .web.admission import Admission, Guarded, aadmit, admit
from .web.holding import AReleasedOnError, ReleasedOnError, afinish, finish
from .web.responses import add_ratelimit_headers, arespond, respond

View = Callable[..., Any]


def semaphore(
    name: str,
    key: Any = None,
    wait: float | None = None,
    weight: int | None = None,
    block: bool = True,
    raise_exception: bool = False,
) -> Callable[[View], View]:
    """Guard a view with the semaphore ``name`` from ``settings.SEMAPHORES``.

    ``key`` picks the partition (``"ip"``, ``"user"``, ``"user_or_ip"``,
    ``"header:<name>"``, ``"get:<param>"``, a callable or its dotted path);
    None uses the semaphore's own ``key`` option. ``wait`` and ``weight``
    default to the semaphore's options.

    When no permit comes within ``wait``: the configured 503 by default;
    ``raise_exception=True`` raises ``SemaphoreFull`` for your own handler
    (``SemaphoreMiddleware.process_exception`` turns it into the 503);
    ``block=False`` runs the view anyway, with ``request.semaphore.limited``
    set, as django-ratelimit's ``request.limited``.

    The permit is held until the response is complete: a streaming response
    keeps it until the stream is closed; an exception releases it. The
    view's ``request.semaphore`` is the ``Admission`` (``outcome``,
    ``limited``, ``permit``, ``retry_after``); ``request.semaphores`` maps
    every semaphore that looked at the request to its admission.
    """

    guarded = Guarded(name, key, wait, weight)

    def rejected(request: HttpRequest, admission: Admission) -> HttpResponseBase:
        # A waiting room answers for itself: raised, its visitor would lose the ticket that keeps its place.
        if raise_exception and admission.room is None:
            raise admission.exception()
        return respond(request, admission.exception(), admission)

    async def arejected(request: HttpRequest, admission: Admission) -> HttpResponseBase:
        # The 503 view and its template may touch the database (request.user):
        # arespond keeps that off the event loop.
        if raise_exception and admission.room is None:
            raise admission.exception()
        return await arespond(request, admission.exception(), admission)

    async def guard_async(view: View, request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponseBase:
        admission = await aadmit(request, guarded)
        # Everything after the grant is inside: whatever raises, the permit goes back.
        async with AReleasedOnError(admission.arelease, lambda: admission.release(posted=True)):
            if admission.rejected and block:
                return await arejected(request, admission)
            response = view(request, *args, **kwargs)
            if inspect.isawaitable(response):
                response = await response
            add_ratelimit_headers(response, [admission])
            return await afinish(request, response, [admission])

    def guard_sync(view: View, request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponseBase:
        admission = admit(request, guarded)
        with ReleasedOnError(admission.release):
            if admission.rejected and block:
                return rejected(request, admission)
            response = view(request, *args, **kwargs)
            add_ratelimit_headers(response, [admission])
            return finish(request, response, [admission])

    def decorator(view: View) -> View:
        if iscoroutinefunction(view):

            async def async_view(request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponseBase:
                return await guard_async(view, request, *args, **kwargs)

            return _recorded(wraps(view)(async_view))

        def sync_view(request: HttpRequest, *args: Any, **kwargs: Any) -> Any:
            # A sync callable run on the event loop's own thread is an async
            # class-based view's dispatch(): its caller awaits what it returns.
            if _on_event_loop():
                return guard_async(view, request, *args, **kwargs)
            return guard_sync(view, request, *args, **kwargs)

        return _recorded(wraps(view)(sync_view))

    def _recorded(wrapper: View) -> View:
        # For the system checks (E012, W009): which semaphores, at which weight and key, a routed view takes. A
        # function takes attributes; a Callable type declares none.
        guards = (*getattr(wrapper, "semaphore_guards", ()), (name, weight, key))
        wrapper.semaphore_guards = guards  # type: ignore[attr-defined]
        return wrapper

    return decorator


def _on_event_loop() -> bool:
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return False
    return True
