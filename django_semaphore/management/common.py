"""What the semaphore_* commands share: error wording and target lookup."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

from django.core.management.base import CommandError

from ..exceptions import BackendUnavailable, UnknownSemaphore
from ..overview import expand, partition_of
from ..semaphore import OUTAGE_ERRORS, Semaphore, get_semaphore

T = TypeVar("T")


def guarded(action: Callable[[], T]) -> T:
    """Run ``action``; an outage or an unknown name becomes a one-line CommandError (exit status 1)."""
    try:
        return action()
    except BackendUnavailable as exc:
        raise CommandError(f"Redis is unreachable: {exc.__cause__ or exc}") from exc
    except OUTAGE_ERRORS as exc:
        raise CommandError(f"Redis is unreachable: {exc}") from exc
    except UnknownSemaphore as exc:
        raise CommandError(str(exc)) from exc


def targets(name: str, key: str | None) -> list[Semaphore]:
    """The partitions an operator's command acts on.

    ``--key`` picks one partition; a keyed semaphore without it means all its
    known partitions; a plain semaphore is just itself.
    """
    sem = get_semaphore(name)
    if key is not None:
        if sem.config.key is None:
            raise CommandError(f"Semaphore {name!r} is not keyed; drop --key.")
        return [partition_of(sem, key)]
    return expand(sem)


def describe(sem: Semaphore) -> str:
    return sem.name if sem.partition is None else f"{sem.name} [key {sem.key}]"


def confirm(prompt: str, options: dict[str, Any]) -> bool:
    """Ask on the terminal unless --noinput was given."""
    if not options["interactive"]:
        return True
    return input(f"{prompt} Type 'yes' to continue, or 'no' to cancel: ").strip().lower() == "yes"
