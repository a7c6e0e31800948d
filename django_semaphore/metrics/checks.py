"""E021 and W008: the metrics face's settings (metrics/conf.py)."""

from __future__ import annotations

from typing import Any

from django.core.checks import CheckMessage

from ..core.checks import error, warning
from ..core.conf import MAX_SECONDS
from .conf import metrics_setting

# A token shorter than this is easy to guess; 32 URL-safe characters (secrets.token_urlsafe(24)) are not.
SHORT_TOKEN = 24
HINT = "See the docs, guides/metrics.md."


def check_metrics_settings(app_configs: Any = None, **kwargs: Any) -> list[CheckMessage]:
    messages: list[CheckMessage] = []
    token = metrics_setting("SEMAPHORE_METRICS_TOKEN")
    listed = [token] if isinstance(token, str) else token if isinstance(token, (list, tuple)) else None
    if token is not None and (not listed or not all(isinstance(t, str) and t for t in listed)):
        messages.append(error(21, "SEMAPHORE_METRICS_TOKEN must be None, a non-empty string or a list of them.", HINT))
    elif listed and any(len(t) < SHORT_TOKEN for t in listed):
        messages.append(
            warning(
                8,
                f"SEMAPHORE_METRICS_TOKEN holds a token shorter than {SHORT_TOKEN} characters: it opens the metrics "
                "to whoever guesses it.",
                "Use python -c 'import secrets; print(secrets.token_urlsafe(32))'.",
            )
        )
    if not isinstance(metrics_setting("SEMAPHORE_METRICS_PARTITIONS"), bool):
        messages.append(error(21, "SEMAPHORE_METRICS_PARTITIONS must be True or False.", HINT))
    most = metrics_setting("SEMAPHORE_METRICS_MAX_PARTITIONS")
    if not isinstance(most, int) or isinstance(most, bool) or not 1 <= most <= 10_000:
        messages.append(
            error(21, f"SEMAPHORE_METRICS_MAX_PARTITIONS must be an integer from 1 to 10000, not {most!r}.", HINT)
        )
    retire = metrics_setting("SEMAPHORE_METRICS_PARTITION_RETIRE")
    if not isinstance(retire, (int, float)) or isinstance(retire, bool) or not 1 <= retire <= MAX_SECONDS:
        messages.append(
            error(
                21,
                f"SEMAPHORE_METRICS_PARTITION_RETIRE must be a number of seconds from 1 to {MAX_SECONDS}, "
                f"not {retire!r}.",
                HINT,
            )
        )
    return messages
