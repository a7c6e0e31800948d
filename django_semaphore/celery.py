"""``@limit_task(name)``: a Celery task runs only with a permit, and retries later instead of waiting.

A worker slot blocked in line for a permit does nothing for anyone; retrying
frees it for other tasks. So when the semaphore is full (or paused) the task
is retried with ``countdown`` = the semaphore's ``retry_after`` plus up to
half of it again at random (tasks turned away together do not all come back
in the same instant), within the task's own ``max_retries``; past them the
task fails with the ``SemaphoreFull``. Redis failing under ``on_error:
"deny"`` retries after ``ERROR_RETRY_AFTER`` (core/failure_policy.py) the same way.

The permit is renewed in the background while the task runs, like any
other, so a task killed mid-run (an ``acks_late`` task whose worker died, a
hard time limit) gives its permit back within one lease, and the message
Celery delivers again takes a permit of its own. Holders are labelled
``task.name[task id]``, as Celery's own log lines name a task.

Needs Celery: ``pip install "django-semaphore[celery]"``. Nothing else in
this package imports this module.
"""

from __future__ import annotations

import functools
import inspect
import random
from collections.abc import Callable
from typing import Any, NoReturn, ParamSpec, TypeVar

from .core.failure_policy import ERROR_RETRY_AFTER, give_back
from .exceptions import BackendUnavailable, SemaphoreFull
from .guards import Guard, KeyFunction

try:
    from celery import current_task
except ImportError as exc:  # pragma: no cover - the message is the point
    raise ImportError('django_semaphore.celery needs Celery: pip install "django-semaphore[celery]"') from exc

P = ParamSpec("P")
R = TypeVar("R")

# A retry comes back after retry_after and at most this share of it again.
JITTER = 0.5


def countdown(retry_after: float) -> float:
    """Seconds until the retry: never before the semaphore expects a permit, spread after that."""
    return retry_after * (1 + random.uniform(0, JITTER))


def limit_task(
    name: str,
    *,
    key: KeyFunction | None = None,
    wait: float = 0,
    weight: int | None = None,
    lease: float | None = None,
) -> Callable[[Callable[P, R]], Callable[P, R]]:
    """Run the task's function only while holding a permit of ``name``; retry the task when none is free.

    Put it under ``@app.task``. ``key`` is called with the task's arguments
    (as the function receives them) and returns the partition of a keyed
    semaphore. ``wait`` is 0 by default: the retry does the waiting, off the
    worker. Called directly rather than as a task, the function raises
    ``SemaphoreFull`` as ``@limit`` does.
    """
    guard = Guard.checked(name, key, wait, weight, lease, whose="task's")

    def decorator(func: Callable[P, R]) -> Callable[P, R]:
        if inspect.iscoroutinefunction(func) or inspect.isgeneratorfunction(func) or inspect.isasyncgenfunction(func):
            raise TypeError(f"@limit_task guards a Celery task's plain function; {func.__qualname__} is not one.")

        @functools.wraps(func)
        def run(*args: P.args, **kwargs: P.kwargs) -> R:
            label, metadata = _holder(func)
            try:
                permit = guard.acquire(args, kwargs, label, metadata)
            except SemaphoreFull as full:
                _retry(full, full.retry_after)
            except BackendUnavailable as error:  # on_error "deny": "allow" runs it unguarded
                _retry(error, ERROR_RETRY_AFTER)
            try:
                return func(*args, **kwargs)
            finally:
                give_back(permit)

        return run

    return decorator


def _holder(func: Callable[..., Any]) -> tuple[str, dict[str, Any]]:
    """The holder's label and metadata: the running task and its id, else the function's name."""
    if not current_task or current_task.request.id is None:
        return f"{func.__module__}.{func.__qualname__}", {}
    request = current_task.request
    return f"{current_task.name}[{request.id}]", {"task": current_task.name, "retries": request.retries}


def _retry(error: SemaphoreFull | BackendUnavailable, retry_after: float) -> NoReturn:
    """Have Celery run the task again later; outside a worker (or past max_retries) ``error`` is raised."""
    if not current_task:
        raise error
    raise current_task.retry(exc=error, countdown=countdown(retry_after))
