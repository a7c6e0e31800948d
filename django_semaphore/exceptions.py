"""Exceptions raised by django-semaphore; all share one base class, ``SemaphoreError``.

The public place to import them from. They are defined in the engine
(``core/errors.py``), which imports nothing from outside ``core/``.
"""

from __future__ import annotations

from .core.errors import (
    BackendUnavailable,
    SemaphoreError,
    SemaphoreFull,
    TooManyPartitions,
    UnknownSemaphore,
    WeightAboveLimit,
    WeightMismatch,
)

__all__ = [
    "BackendUnavailable",
    "SemaphoreError",
    "SemaphoreFull",
    "TooManyPartitions",
    "UnknownSemaphore",
    "WeightAboveLimit",
    "WeightMismatch",
]
