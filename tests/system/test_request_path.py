"""How far a guarded request travels through the package before its acquire reaches Redis.

A request through ``@semaphore`` is traced with ``sys.setprofile`` from the
call of the decorated view to the moment the acquire's command goes onto the
wire (redis-py's ``send_packed_command``), against a real server: every module
of the package whose code runs on the way counts. A newcomer following a
request should meet a handful of modules, each with a job
(docs/internals.md follows the same path); at most 8.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from types import FrameType
from typing import Any

from django.http import HttpRequest, HttpResponse
from django.test import RequestFactory

from django_semaphore.decorators import semaphore

MOST_MODULES = 8
PACKAGE = "django_semaphore"
ON_THE_WIRE = ("send_packed_command", "send_command")


class Trace:
    """The package's modules, in the order their code ran, until the first command was sent."""

    def __init__(self) -> None:
        self.modules: list[str] = []
        self.sent = False

    def __call__(self, frame: FrameType, event: str, arg: Any) -> None:
        if event != "call" or self.sent:
            return
        module = frame.f_globals.get("__name__", "")
        if module.startswith("redis.") and frame.f_code.co_name in ON_THE_WIRE:
            self.sent = True
        elif (module == PACKAGE or module.startswith(PACKAGE + ".")) and module not in self.modules[-1:]:
            self.modules.append(module)

    def run(self, call: Callable[[], object]) -> object:
        sys.setprofile(self)
        try:
            return call()
        finally:
            sys.setprofile(None)

    @property
    def crossed(self) -> list[str]:
        return list(dict.fromkeys(self.modules))


def test_a_guarded_request_reaches_redis_through_at_most_eight_modules(settings) -> None:
    settings.SEMAPHORES = {"traced": {"limit": 2}}

    @semaphore("traced")
    def view(request: HttpRequest) -> HttpResponse:
        return HttpResponse("ok")

    factory = RequestFactory()
    assert view(factory.get("/traced/")).status_code == 200  # the first loads the Lua and reads the settings
    trace = Trace()
    response = trace.run(lambda: view(factory.get("/traced/")))
    assert isinstance(response, HttpResponse) and response.status_code == 200
    assert trace.sent, "the acquire never reached the server"
    path = " -> ".join(trace.modules)
    print(f"{len(trace.crossed)} modules, {len(trace.modules) - 1} changes of module: {path}")
    assert trace.crossed[0] == "django_semaphore.decorators", path
    assert len(trace.crossed) <= MOST_MODULES, path
