"""What the semaphore_* commands share: error wording, target lookup, and how a partition is named.

Whatever a command prints that a client may have written (keys, labels,
tokens as stored) goes through ``safe_text.for_terminal``: printed raw, an
ESC sequence in a request path would drive the operator's terminal.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

from django.core.management.base import CommandError
from redis.exceptions import RedisError

from ..core.errors import is_outage, is_refusal, misconfigured, reason
from ..core.safe_text import for_terminal
from ..core.semaphore import Semaphore, get_semaphore
from ..exceptions import BackendUnavailable, UnknownSemaphore
from ..ops.overview import expand, partition_of

T = TypeVar("T")


def guarded(action: Callable[[], T]) -> T:
    """Run ``action``; any Redis error or an unknown name becomes a one-line CommandError (exit status 1).

    An error that is no outage (WRONGTYPE on a key another program wrote, a
    script's own error) is still one line for the operator, who is running a
    command, not reading a traceback; it says it is worth reporting.
    """
    try:
        return action()
    except (BackendUnavailable, RedisError) as exc:
        if not is_outage(exc):
            raise CommandError(f"Redis answered an error (worth reporting if it persists): {reason(exc)}") from exc
        raise CommandError(outage_line(exc)) from exc
    except UnknownSemaphore as exc:
        raise CommandError(str(exc)) from exc


def outage_line(error: Exception) -> str:
    """Misconfigured, unreachable or refusing: the operator's next step differs (the settings, the network, or
    the server's memory or disk)."""
    if misconfigured(error):
        return f"The Redis connection is misconfigured: {reason(error)}"
    if is_refusal(error):
        return f"Redis refused the command: {reason(error)}"
    return f"Redis is unreachable: {reason(error)}"


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
    """The semaphore, and its key if it is a partition, for the terminal (keys are clients' text)."""
    return sem.name if sem.partition is None else f"{sem.name} [key {for_terminal(sem.key)}]"


def number_option(
    value: object, parse: Callable[[str], T], kind: type[T] | tuple[type[T], ...], error: str
) -> T | None:
    """An option's number, typed on a command line (ASCII digits only: ``ascii_numbers``) or passed to
    ``call_command`` as a number; ``error`` (a CommandError, exit status 1) otherwise. None stays None."""
    if value is None:
        return None
    if isinstance(value, str):
        try:
            return parse(value)
        except ValueError:
            raise CommandError(f"{error} (got {value!r}).") from None  # repr escapes what does not print
    if isinstance(value, bool) or not isinstance(value, kind):
        raise CommandError(error)
    return value


def confirm(prompt: str, options: dict[str, Any]) -> bool:
    """Ask on the terminal unless --noinput was given."""
    if not options["interactive"]:
        return True
    return input(f"{prompt} Type 'yes' to continue, or 'no' to cancel: ").strip().lower() == "yes"
