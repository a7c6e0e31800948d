"""Named, distributed counting semaphores for Django, with permits in Redis."""

from __future__ import annotations

from .core.permit import Permit
from .core.semaphore import Attempt, Semaphore, all_semaphores, get_semaphore
from .exceptions import (
    BackendUnavailable,
    SemaphoreError,
    SemaphoreFull,
    TooManyPartitions,
    UnknownSemaphore,
    WeightAboveLimit,
    WeightMismatch,
)
from .guards import limit

# 0.2 is unreleased: a wheel built from this tree must not pass for 0.1.0 (CHANGELOG.md).
__version__ = "0.2.0.dev0"

__all__ = [
    "Attempt",
    "BackendUnavailable",
    "Permit",
    "Semaphore",
    "SemaphoreError",
    "SemaphoreFull",
    "TooManyPartitions",
    "UnknownSemaphore",
    "WeightAboveLimit",
    "WeightMismatch",
    "all_semaphores",
    "get_semaphore",
    "limit",
]
