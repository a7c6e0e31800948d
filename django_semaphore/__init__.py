"""Named, distributed counting semaphores for Django, with permits in Redis."""

from __future__ import annotations

from .exceptions import BackendUnavailable, SemaphoreError, SemaphoreFull, UnknownSemaphore, WeightAboveLimit
from .permit import Permit
from .semaphore import Attempt, Semaphore, all_semaphores, get_semaphore

__version__ = "0.1.0"

__all__ = [
    "Attempt",
    "BackendUnavailable",
    "Permit",
    "Semaphore",
    "SemaphoreError",
    "SemaphoreFull",
    "UnknownSemaphore",
    "WeightAboveLimit",
    "all_semaphores",
    "get_semaphore",
]
