"""What happened to each guarded request, counted in this process: the public place to read the counts.

``counts()`` and the outcome names are defined on the request path
(``web/request_outcomes.py``, which says what each one means); this module
is where the guides import them from.
"""

from __future__ import annotations

from .web.request_outcomes import (
    ACQUIRED,
    ALL,
    BYPASSED,
    DRY_RUN_FULL,
    ERROR_ALLOWED,
    ERROR_DENIED,
    FULL,
    NOT_LIMITED,
    counts,
    reset,
)

__all__ = [
    "ACQUIRED",
    "ALL",
    "BYPASSED",
    "DRY_RUN_FULL",
    "ERROR_ALLOWED",
    "ERROR_DENIED",
    "FULL",
    "NOT_LIMITED",
    "counts",
    "reset",
]
