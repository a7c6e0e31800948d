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
    """No permit was free within the wait allowed, or the semaphore is paused.

    ``retry_after`` is whole seconds until a permit is expected to come free
    (the sooner of the earliest lease end and the typical hold, both measured
    by the server; at least 1), which is what a ``Retry-After`` header needs;
    a paused semaphore's is ``PAUSED_RETRY_AFTER``, since no lease says when
    an operator resumes it. ``partition`` is the hash of the full partition of
    a keyed semaphore (None for a whole one), as ``Semaphore.partition``.
    """

    def __init__(
        self,
        name: str,
        partition: str | None = None,
        retry_after: int = 1,
        *,
        used: int | None = None,
        limit: int | None = None,
        waiting: int | None = None,
    ) -> None:
        self.name = name
        self.partition = partition
        self.retry_after = retry_after
        self.used = used
        self.limit = limit
        self.waiting = waiting
        state = "paused" if self.paused else "full"
        super().__init__(f"Semaphore {name!r} is {state}; retry after {retry_after}s.")

    @property
    def paused(self) -> bool:
        """An operator paused the semaphore (its limit is 0): waiting longer would not help."""
        return self.limit == 0


class WeightAboveLimit(SemaphoreError, ValueError):
    """A permit asked for more weight than the semaphore's whole limit.

    Such a request could never be granted, so it fails at once instead of
    waiting forever.
    """


class WeightMismatch(SemaphoreError, ValueError):
    """An identity asked again with another weight than the permit it holds or waits for.

    One identity is one holder: its permit cannot change size, so the second
    request is refused rather than counted at either weight.
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


class TooManyPartitions(BackendUnavailable):
    """No longer raised: kept so that code catching it still imports.

    ``max_partitions`` used to refuse a new key once a keyed semaphore kept
    that many partitions, which let anyone who can vary the key lock new
    clients out (or let them through unguarded). A new key is now always
    served and limited, and idle partitions are evicted to make room.
    """
