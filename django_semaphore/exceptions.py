"""Exceptions raised by django-semaphore; all share one base class."""

from __future__ import annotations


class SemaphoreError(Exception):
    """Base class, so callers can catch everything this app raises."""


class UnknownSemaphore(SemaphoreError, LookupError):
    """A name that ``settings.SEMAPHORES`` does not declare.

    Raised instead of silently creating a limit nobody configured: a typo in a
    decorator must not turn into an unlimited (or unrelated) semaphore.
    """

    def __init__(self, name: str, known: list[str]) -> None:
        self.name = name
        self.known = sorted(known)
        listed = ", ".join(self.known) or "none"
        super().__init__(f"Unknown semaphore {name!r}; settings.SEMAPHORES declares: {listed}.")


class SemaphoreFull(SemaphoreError):
    """No permit was free within the wait allowed.

    ``retry_after`` is whole seconds until a permit is expected to come free
    (the sooner of the earliest lease end and the typical hold, both measured
    by the server; at least 1), which is what a ``Retry-After`` header needs.
    """

    def __init__(
        self,
        name: str,
        key: str | None = None,
        retry_after: int = 1,
        *,
        used: int | None = None,
        limit: int | None = None,
        waiting: int | None = None,
    ) -> None:
        self.name = name
        self.key = key
        self.retry_after = retry_after
        self.used = used
        self.limit = limit
        self.waiting = waiting
        super().__init__(f"Semaphore {name!r} is full; retry after {retry_after}s.")


class WeightAboveLimit(SemaphoreError, ValueError):
    """A permit asked for more weight than the semaphore's whole limit.

    Such a request could never be granted, so it fails at once instead of
    waiting forever.
    """


class BackendUnavailable(SemaphoreError):
    """Redis could not be reached or did not answer in time.

    The Django layer turns this into the semaphore's ``on_error`` policy;
    direct callers decide for themselves. ``name`` and ``partition`` say
    which semaphore it was, so a fail-closed answer can use that
    semaphore's own ``view``.
    """

    def __init__(self, message: str, *, name: str | None = None, partition: str | None = None) -> None:
        self.name = name
        self.partition = partition
        super().__init__(message)
