"""The semaphore's own 503s in the log, at the level operators choose (``SEMAPHORE_503_LOG_LEVEL``).

Django logs every 5xx on ``django.request`` at ERROR. A full semaphore is the
limit doing its job, and under load it answers hundreds of 503s a second:
at ERROR they flood error tracking and page whoever is on call. They are
logged here first, with Django's own message and ``extra`` (status code,
request), at the chosen level; Django then sees the response as logged and
does not log it again. Other 5xx keep Django's ERROR.
"""

from __future__ import annotations

from django.conf import settings
from django.http import HttpRequest, HttpResponseBase
from django.utils.log import log_response

SETTING = "SEMAPHORE_503_LOG_LEVEL"
DEFAULT_LEVEL = "WARNING"
LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL")


def level_problem(value: object) -> str | None:
    """What is wrong with a value of the setting, or None."""
    if isinstance(value, str) and value.upper() in LEVELS:
        return None
    return f"must be one of {', '.join(LEVELS)}, not {value!r}."


def log_answer(request: HttpRequest, response: HttpResponseBase) -> None:
    """Log a semaphore's answer as Django would, at the chosen level (a custom view's 2xx is not logged)."""
    if response.status_code < 400:
        return
    chosen = getattr(settings, SETTING, DEFAULT_LEVEL)
    level = chosen.lower() if level_problem(chosen) is None else "error"  # E010 names a wrong value
    log_response(
        "%s: %s",
        response.reason_phrase,
        request.path,
        # django-stubs narrow it to HttpResponse; Django logs any response (it reads status_code).
        response=response,  # type: ignore[arg-type]
        request=request,
        level=level,
    )
