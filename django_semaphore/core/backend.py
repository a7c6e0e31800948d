"""Running a script call for a semaphore, with outages turned into ``BackendUnavailable``.

The one place that decides what an outage is for the engine: the semaphore,
its permits and the background worker all run their scripts through here.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from redis.exceptions import RedisError

from . import errors, scripts, signals
from .calls import ScriptCall
from .connection import aclient, get_client
from .errors import BackendUnavailable
from .outages import outage_log


@contextmanager
def translated(name: str, partition: str | None) -> Iterator[None]:
    """Turn an outage of Redis into ``BackendUnavailable`` (and the signal); let bugs through.

    A call Redis answered ends an outage this process is logging (core/outages.py).
    """
    try:
        yield
    except RedisError as exc:
        if not errors.is_outage(exc):
            raise  # a bug (a wrong command, a script error), not the server's state
        signals.emit(signals.semaphore_backend_error, name=name, partition=partition, error=exc)
        raise BackendUnavailable(
            f"Redis unavailable for semaphore {name!r}: {errors.reason(exc)}", name=name, partition=partition
        ) from exc
    outage_log.answered()


def run(call: ScriptCall, name: str, partition: str | None) -> Any:
    with translated(name, partition):
        return scripts.run(get_client(), call)


async def arun(call: ScriptCall, name: str, partition: str | None) -> Any:
    with translated(name, partition):
        return await scripts.arun(await aclient(), call)
