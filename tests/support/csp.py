"""A strict Content-Security-Policy on every test response.

With it, an inline ``<script>`` or ``<style>`` on a page is a console error
in the browser tests, which fail on console errors.
"""

from __future__ import annotations

from collections.abc import Callable

from django.http import HttpRequest, HttpResponse

POLICY = "default-src 'self'; img-src 'self' data:"


def strict_csp(get_response: Callable[[HttpRequest], HttpResponse]) -> Callable[[HttpRequest], HttpResponse]:
    def middleware(request: HttpRequest) -> HttpResponse:
        response = get_response(request)
        response.headers.setdefault("Content-Security-Policy", POLICY)
        return response

    return middleware
