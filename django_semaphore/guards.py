"""``@limit(name)``: a semaphore around any function, wherever it runs.

The view decorator answers a full semaphore with a 503. A function called from
a task, a management command or a script has no response to give, so here a
full semaphore raises ``SemaphoreFull`` (with ``retry_after``) for its caller
to handle. The permits are the same ones the views take: "at most 3 calls to
the supplier" holds across web processes, workers and scripts together.

Nothing here imports ``django.http``: ``django_semaphore.celery`` builds on
``Guard`` for tasks, and a worker never loads the web layer for it.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import AsyncIterator, Callable, Generator
from contextlib import aclosing
from dataclasses import dataclass
from types import TracebackType
from typing import Any, ParamSpec, TypeVar

from .core.failure_policy import agive_back, give_back, let_through
from .core.permit import Permit
from .core.redis_keys import CUSTOM, check_name
from .core.semaphore import Semaphore, get_semaphore, granted
from .exceptions import BackendUnavailable

P = ParamSpec("P")
R = TypeVar("R")
KeyFunction = Callable[..., Any]


@dataclass(frozen=True)
class Guard:
    """What one decorated function takes: which semaphore, keyed how, waiting how long.

    ``acquire`` returns the permit, or None when the call runs unguarded (its
    key function said "not limited", or Redis failed under ``on_error:
    "allow"``); it raises ``SemaphoreFull`` when no permit came, and
    ``BackendUnavailable`` when Redis failed under ``on_error: "deny"``.
    """

    name: str
    key: KeyFunction | None = None
    wait: float | None = None
    weight: int | None = None
    lease: float | None = None

    def semaphore(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Semaphore | None:
        """The semaphore (or partition) this call takes; None when the key function returned None or ""."""
        whole = get_semaphore(self.name)
        keyed = whole.config.key is not None
        if self.key is None:
            if keyed:
                # Its holders would sit outside every partition, where no operator's page looks.
                raise ValueError(
                    f"Semaphore {self.name!r} is keyed: give key=, a function of the call's arguments "
                    "that returns the partition."
                )
            return whole
        if not keyed:
            raise ValueError(
                f"Semaphore {self.name!r} is not keyed, so key= has no partition to pick: declare a 'key' "
                "for it in settings.SEMAPHORES, or drop key=."
            )
        value = self.key(*args, **kwargs)
        if inspect.isawaitable(value):
            getattr(value, "close", lambda: None)()
            raise TypeError(f"The key function of {self.name!r} must return a value, not an awaitable.")
        if value is None or value == "":
            return None
        return get_semaphore(self.name, f"{CUSTOM}{value}")

    @classmethod
    def checked(
        cls,
        name: str,
        key: KeyFunction | None,
        wait: float | None,
        weight: int | None,
        lease: float | None,
        *,
        whose: str,
    ) -> Guard:
        """A decorator's guard, its name and key checked where the decorator is written (``@limit``, ``@limit_task``).

        ``whose``: whose arguments the key function is given ("call's", "task's"), for the error.
        """
        check_name(name)
        if key is not None and not callable(key):
            raise TypeError(f"key must be a function of the {whose} arguments, not {type(key).__name__}.")
        return cls(name, key, wait, weight, lease)

    def _options(self, label: str, metadata: dict[str, Any] | None) -> dict[str, Any]:
        return {"wait": self.wait, "weight": self.weight, "lease": self.lease, "label": label, "metadata": metadata}

    def acquire(
        self, args: tuple[Any, ...], kwargs: dict[str, Any], label: str, metadata: dict[str, Any] | None = None
    ) -> Permit | None:
        """The permit for one call of the guarded function (see the class).

        ``aacquire`` is its asyncio twin. They share everything but the one
        awaited call (``semaphore``, ``_options``, ``granted``, ``_FailurePolicy``).
        """
        sem = self.semaphore(args, kwargs)
        with _FailurePolicy(sem, label):
            if sem is not None:
                return granted(sem, sem.attempt(**self._options(label, metadata)))
        return None  # not limited, or Redis failed and its policy runs the call unguarded

    async def aacquire(
        self, args: tuple[Any, ...], kwargs: dict[str, Any], label: str, metadata: dict[str, Any] | None = None
    ) -> Permit | None:
        """``acquire`` on the asyncio client."""
        sem = self.semaphore(args, kwargs)
        with _FailurePolicy(sem, label):
            if sem is not None:
                return granted(sem, await sem.aattempt(**self._options(label, metadata)))
        return None


@dataclass
class _FailurePolicy:
    """Around a call's attempt: the semaphore's failure policy, as for requests.

    Redis failing under "allow" ends the ``with`` and the call runs unguarded;
    under "deny" the ``BackendUnavailable`` is raised on.
    """

    sem: Semaphore | None
    label: str

    def __enter__(self) -> None:
        return None

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, trace: TracebackType | None
    ) -> bool:
        if not isinstance(error, BackendUnavailable) or self.sem is None:
            return False
        return let_through(self.sem.config, error, where=self.label)


def limit(
    name: str,
    *,
    key: KeyFunction | None = None,
    wait: float | None = None,
    weight: int | None = None,
    lease: float | None = None,
    label: str | None = None,
) -> Callable[[Callable[P, R]], Callable[P, R]]:
    """Run the decorated function only while holding a permit of the semaphore ``name``.

    Works on plain functions, ``async def`` (on the asyncio client),
    generators and async generators (which hold the permit from their first
    item until exhausted or closed). ``key`` is called with the call's own
    arguments and returns the partition of a keyed semaphore (None: run
    unguarded); ``wait``, ``weight`` and ``lease`` default to the
    semaphore's settings; holders are labelled with the function's module
    and qualified name unless ``label`` says otherwise. When no permit comes
    within ``wait``, ``SemaphoreFull`` is raised (``retry_after`` says when
    to try again; a paused semaphore's is ``PAUSED_RETRY_AFTER``).
    """
    guard = Guard.checked(name, key, wait, weight, lease, whose="call's")

    def decorator(func: Callable[P, R]) -> Callable[P, R]:
        shown = label or f"{func.__module__}.{func.__qualname__}"
        wrapper: Callable[..., Any]
        if inspect.isasyncgenfunction(func):
            wrapper = _async_generator(guard, func, shown)
        elif inspect.iscoroutinefunction(func):
            wrapper = _coroutine(guard, func, shown)
        elif inspect.isgeneratorfunction(func):
            wrapper = _generator(guard, func, shown)
        else:
            wrapper = _function(guard, func, shown)
        return functools.wraps(func)(wrapper)

    return decorator


def _function(guard: Guard, func: Callable[..., Any], label: str) -> Callable[..., Any]:
    def call(*args: Any, **kwargs: Any) -> Any:
        permit = guard.acquire(args, kwargs, label)
        try:
            return func(*args, **kwargs)
        finally:
            give_back(permit)

    return call


def _coroutine(guard: Guard, func: Callable[..., Any], label: str) -> Callable[..., Any]:
    async def call(*args: Any, **kwargs: Any) -> Any:
        permit = await guard.aacquire(args, kwargs, label)
        try:
            return await func(*args, **kwargs)
        finally:
            await agive_back(permit)

    return call


def _generator(guard: Guard, func: Callable[..., Any], label: str) -> Callable[..., Generator[Any, Any, Any]]:
    def call(*args: Any, **kwargs: Any) -> Generator[Any, Any, Any]:
        # Runs at the first next(), as the generator itself would; close() or the garbage
        # collector's finalisation ends the `yield from` with GeneratorExit, releasing the permit.
        permit = guard.acquire(args, kwargs, label)
        try:
            return (yield from func(*args, **kwargs))
        finally:
            give_back(permit)

    return call


def _async_generator(guard: Guard, func: Callable[..., Any], label: str) -> Callable[..., AsyncIterator[Any]]:
    async def call(*args: Any, **kwargs: Any) -> AsyncIterator[Any]:
        permit = await guard.aacquire(args, kwargs, label)
        try:
            async with aclosing(func(*args, **kwargs)) as items:
                async for item in items:
                    yield item
        finally:
            await agive_back(permit)

    return call
