"""The permits ``with`` / ``async with`` blocks entered, innermost last.

A context variable, not an attribute of the semaphore: threads and tasks
sharing one ``Semaphore`` object (``get_semaphore`` hands out one per name)
must each leave with their own permit, and a block nested in another of the
same semaphore leaves with its own.
"""

from __future__ import annotations

from contextvars import ContextVar

from .permit import Permit

_entered: ContextVar[tuple[tuple[object, Permit], ...]] = ContextVar("django_semaphore_entered", default=())


def push(owner: object, permit: Permit) -> Permit:
    """``owner`` (a semaphore) entered a block holding ``permit``; returns the permit."""
    _entered.set((*_entered.get(), (owner, permit)))
    return permit


def pop(owner: object) -> Permit:
    """The permit this thread or task entered last with ``owner``, taken off the stack."""
    stack = _entered.get()
    for index in range(len(stack) - 1, -1, -1):
        if stack[index][0] is owner:
            _entered.set(stack[:index] + stack[index + 1 :])
            return stack[index][1]
    raise RuntimeError(f"{owner!r} was not entered in this thread or task.")
