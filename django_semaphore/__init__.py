"""Named, distributed counting semaphores for Django, with permits in Redis."""

from __future__ import annotations

from .core import __version__ as __version__
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
