"""Signals for metrics and alerting: the public place to import them from.

They are defined in the engine (``core/signals.py``, which documents each
one's arguments), so that the engine imports nothing from outside ``core/``.
"""

from __future__ import annotations

from .core.signals import (
    semaphore_acquired,
    semaphore_backend_error,
    semaphore_keys_lost,
    semaphore_limit_adapted,
    semaphore_lost,
    semaphore_rejected,
    semaphore_released,
    semaphore_request_outcome,
)

__all__ = [
    "semaphore_acquired",
    "semaphore_backend_error",
    "semaphore_keys_lost",
    "semaphore_limit_adapted",
    "semaphore_lost",
    "semaphore_rejected",
    "semaphore_released",
    "semaphore_request_outcome",
]
