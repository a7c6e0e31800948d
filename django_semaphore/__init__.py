"""Named, distributed counting semaphores for Django, with permits in Redis."""

from __future__ import annotations

from . import exceptions
from .core import __version__ as __version__
from .core.permit import Permit
from .core.semaphore import Attempt, Semaphore, all_semaphores, get_semaphore
from .exceptions import *  # noqa: F403  (every exception class: exceptions.__all__)
from .guards import limit

__all__ = ["Attempt", "Permit", "Semaphore", "all_semaphores", "get_semaphore", "limit"]
__all__ += exceptions.__all__
