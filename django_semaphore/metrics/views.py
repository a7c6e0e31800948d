"""The Prometheus endpoint: the text exposition of one reading, for the dashboard's viewers or a bearer token.

A scraper shows ``Authorization: Bearer <token>`` with a token of
``SEMAPHORE_METRICS_TOKEN``; a person signed in to the site may look from a
browser when the dashboard would let them: active staff with its view
permission. The exposition shows what the dashboard shows (with
``SEMAPHORE_METRICS_PARTITIONS``, clients' keys: addresses, user ids, header
values), so any laxer rule would be a way around the dashboard's. Anybody
else gets 401 (no credentials, or a wrong token) or 403 (signed in, not
allowed). Redis not answering is a 503, which Prometheus records as a failed
scrape (``up`` 0), never a 500.
"""

from __future__ import annotations

import hmac

from django.http import HttpRequest, HttpResponse
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_GET

from ..core.errors import BackendUnavailable
from ..permissions import VIEW
from .conf import tokens
from .prometheus import CONTENT_TYPE, render
from .reading import read

REALM = 'Bearer realm="django-semaphore metrics"'


def _bearer(request: HttpRequest) -> str | None:
    scheme, _, credentials = request.headers.get("Authorization", "").partition(" ")
    return credentials.strip() if scheme.lower() == "bearer" and credentials.strip() else None


def _token_matches(shown: str) -> bool:
    # Every configured token is compared, each in constant time: no answer says which one nearly matched.
    matched = False
    for token in tokens():
        matched |= hmac.compare_digest(shown.encode(), token.encode())
    return matched


def _refused(request: HttpRequest) -> HttpResponse | None:
    """The answer to a caller who may not read the metrics; None for one who may."""
    shown = _bearer(request)
    if shown is not None:
        if _token_matches(shown):
            return None
    else:
        user = getattr(request, "user", None)
        if user is not None and user.is_active and user.is_staff and user.has_perm(VIEW):
            return None
        if user is not None and user.is_authenticated:
            refusal = "Only staff who may view the semaphore dashboard.\n"
            return HttpResponse(refusal, status=403, content_type="text/plain; charset=utf-8")
    response = HttpResponse(
        "A staff login that may view the semaphore dashboard, or a bearer token, is required.\n",
        status=401,
        content_type="text/plain",
    )
    response["WWW-Authenticate"] = REALM
    return response


@never_cache
@require_GET
def metrics(request: HttpRequest) -> HttpResponse:
    refused = _refused(request)
    if refused is not None:
        return refused
    try:
        body = render(read())
    except BackendUnavailable as exc:
        return HttpResponse(f"# {exc}\n", status=503, content_type=CONTENT_TYPE)
    return HttpResponse(body, content_type=CONTENT_TYPE)
