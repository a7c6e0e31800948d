"""``SemaphoreMiddleware``: guard requests by URL name, path or view, from settings.

Put it after ``AuthenticationMiddleware`` (user keys and the bypass
predicate need ``request.user``). The rules are described in ``web/rules.py``
and docs/guides/middleware.md.

Several rules may match one request (a per-user limit and a site-wide one):
their semaphores are taken in one global order (by name), so two requests
never wait for each other's permits in opposite orders, and given back in
reverse order. ``process_exception`` stays synchronous (an async one is
never awaited by Django) and turns a ``SemaphoreFull`` or ``BackendUnavailable``
raised by a view into the configured 503.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from asgiref.sync import async_to_sync, iscoroutinefunction, markcoroutinefunction, sync_to_async
from django.http import HttpRequest, HttpResponseBase

from .exceptions import BackendUnavailable, SemaphoreFull
from .web import request_outcomes
from .web.admission import Admission, aadmit, admit, skipped
from .web.holding import AReleasedOnError, ReleasedOnError, afinish, arelease_all, finish, release_all
from .web.responses import add_ratelimit_headers, arespond, respond
from .web.rules import RequestView, Rule, active_rules, bypass_predicate, exempt_path
from .web.visits import dress

GetResponse = Callable[[HttpRequest], Any]


def matching_rules(request: HttpRequest) -> list[Rule]:
    """The rules for this request, one per semaphore, in the global acquisition order."""
    view = RequestView(request)
    chosen: dict[str, Rule] = {}
    for rule in active_rules():
        if rule.semaphore not in chosen and rule.matches(request, view):
            chosen[rule.semaphore] = rule
    return [chosen[name] for name in sorted(chosen)]


class SemaphoreMiddleware:
    sync_capable = True
    async_capable = True

    def __init__(self, get_response: GetResponse) -> None:
        self.get_response = get_response
        self.async_mode = iscoroutinefunction(get_response)
        if self.async_mode:
            markcoroutinefunction(self)

    def __call__(self, request: HttpRequest) -> Any:
        if self.async_mode:
            return self.__acall__(request)
        rules = [] if exempt_path(request) else matching_rules(request)
        if rules and _bypass(request):
            _record_bypass(request, rules)
            return self.get_response(request)
        held = _admit_all(request, rules)
        if held and held[-1].rejected:
            release_all(held)
            return self._rejected(request, held)
        with ReleasedOnError(lambda: release_all(held)):
            response = self.get_response(request)
            add_ratelimit_headers(response, held)
            return finish(request, response, held)

    async def __acall__(self, request: HttpRequest) -> HttpResponseBase:
        rules = [] if exempt_path(request) else matching_rules(request)
        if rules and await _abypass(request):
            _record_bypass(request, rules)
            response: HttpResponseBase = await self.get_response(request)  # async_mode: a coroutine function
            return response
        held = await _aadmit_all(request, rules)
        if held and held[-1].rejected:
            await arelease_all(held)
            return await self._arejected(request, held)
        async with AReleasedOnError(lambda: arelease_all(held), lambda: release_all(held, posted=True)):
            response = await self.get_response(request)
            add_ratelimit_headers(response, held)
            return await afinish(request, response, held)

    def _rejected(self, request: HttpRequest, held: list[Admission]) -> HttpResponseBase:
        response = respond(request, held[-1].exception(), held[-1])
        dress(response, [admission.room for admission in held])  # a room's visitor keeps its ticket
        return response

    async def _arejected(self, request: HttpRequest, held: list[Admission]) -> HttpResponseBase:
        response = await arespond(request, held[-1].exception(), held[-1])
        dress(response, [admission.room for admission in held])
        return response

    def process_exception(self, request: HttpRequest, exception: Exception) -> HttpResponseBase | None:
        if isinstance(exception, (SemaphoreFull, BackendUnavailable)):
            return respond(request, exception)
        return None


def _admit_all(request: HttpRequest, rules: list[Rule]) -> list[Admission]:
    """Each rule's admission in order, up to the first rejection.

    Anything raised on the way (a key function, a weight check, a signal
    receiver) gives back the permits already taken before it propagates:
    nobody else holds a reference that could release them.
    """
    held: list[Admission] = []
    with ReleasedOnError(lambda: release_all(held)):
        for rule in rules:
            held.append(admit(request, rule.guarded))
            if held[-1].rejected:
                break
    return held


async def _aadmit_all(request: HttpRequest, rules: list[Rule]) -> list[Admission]:
    held: list[Admission] = []
    async with AReleasedOnError(lambda: arelease_all(held)):
        for rule in rules:
            held.append(await aadmit(request, rule.guarded))
            if held[-1].rejected:
                break
    return held


def _bypass(request: HttpRequest) -> bool:
    predicate = bypass_predicate()
    if iscoroutinefunction(predicate):
        return bool(async_to_sync(predicate)(request))
    return bool(predicate(request))


async def _abypass(request: HttpRequest) -> bool:
    """The bypass predicate, awaited if async, else in a thread (it may read ``request.user``)."""
    predicate = bypass_predicate()
    if iscoroutinefunction(predicate):
        return bool(await predicate(request))
    return bool(await sync_to_async(predicate)(request))


def _record_bypass(request: HttpRequest, rules: list[Rule]) -> None:
    for rule in rules:
        skipped(request, rule.semaphore, request_outcomes.BYPASSED, rule.mode)
