"""Which partitions of a keyed semaphore the metrics name on their own: a fixed number, kept, the rest "other".

A partition's key is what a client sent, so there can be a new one with
every request. A time-series database keeps every series it ever saw, so
reporting the partitions used most recently, as each scrape finds them,
would name new ones at every scrape under a flood of fresh keys: the number
of series grows without end even though each scrape is bounded. Here the
places are sticky instead (lua/metric_series.lua): at most ``places``
partitions have a series of their own, each the first a read found in use
(a holder or a waiter) while a place was free, kept as long as reads find it
in use at least once per ``retire`` period, and only then given up to the
next one found in use. Everything else is summed under one key, ``other``.
So a scrape names at most ``places`` keys and ``other``, and a place
changes hands only after its partition went a whole period unused: over any
span of n retire periods a database sees at most (n + 1) * ``places`` + 1
keys, whatever clients send.

The places live in Redis beside the partition registry (the name's slot):
every process and host reports the same partitions, a restart changes
nothing, and two scrapes at once cannot hand out one place twice.
"""

from __future__ import annotations

from typing import Any

from .calls import ScriptCall
from .conf import key_prefix
from .redis_keys import SemaphoreKeys

OTHER = "other"


def labels_key(name: str) -> str:
    return SemaphoreKeys.series_labels_of(key_prefix(), name)


def series_key(name: str) -> str:
    return SemaphoreKeys.series_of(key_prefix(), name)


def read_placed(pipe: Any, name: str) -> None:
    """Queue the read of ``name``'s places (partition hash -> key) on a pipeline; ``placed`` parses it."""
    pipe.hgetall(labels_key(name))


def placed(reply: dict[Any, Any]) -> dict[str, str]:
    return {text(partition): text(label) for partition, label in reply.items()}


def place_call(name: str, in_use: list[tuple[str, str]], places: int, retire_ms: int) -> ScriptCall:
    """The script that keeps ``name``'s places, given its partitions a read found in use (hash, key), busiest first."""
    args: list[Any] = [places, retire_ms]
    for partition, label in in_use:
        args += [partition, label]
    return ScriptCall("metric_series", [series_key(name), labels_key(name)], args)


def text(value: Any) -> str:
    return value.decode("utf-8", "surrogatepass") if isinstance(value, bytes) else str(value)
