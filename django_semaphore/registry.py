"""Which partitions a keyed semaphore has, without SCAN over the keyspace.

A partition's keys live in its own cluster slot, so no script can record it
in a shared list; each process records a partition it serves in a hash under
the semaphore's name, once per half idle period (not on every acquire), and
readers prune entries whose partition has since expired.
"""

from __future__ import annotations

import time
from contextlib import suppress
from typing import Any

from .conf import app_setting, key_prefix
from .drivers import OUTAGE_ERRORS
from .keys import SemaphoreKeys

LABEL_LIMIT = 200
# Partitions this process has recorded lately, and when; bounded so that a
# per-IP limit under a botnet cannot grow the process without end.
MEMORY = 10_000
_recorded: dict[tuple[str, str], float] = {}


def registry_key(name: str) -> str:
    return SemaphoreKeys.partitions_of(key_prefix(), name)


def _due(name: str, partition: str) -> bool:
    seen = _recorded.get((registry_key(name), partition))
    return seen is None or time.monotonic() - seen >= app_setting("SEMAPHORE_PARTITION_IDLE") / 2


def _remember(name: str, partition: str) -> None:
    entry = (registry_key(name), partition)
    _recorded.pop(entry, None)
    if len(_recorded) >= MEMORY:
        _recorded.pop(next(iter(_recorded)))
    _recorded[entry] = time.monotonic()


def _queue_writes(pipe: Any, name: str, partition: str, key: Any) -> None:
    registry = registry_key(name)
    pipe.hset(registry, partition, str(key)[:LABEL_LIMIT])
    # The registry lives as long as partitions keep being seen.
    pipe.pexpire(registry, int(app_setting("SEMAPHORE_PARTITION_IDLE") * 2000))


def record(client: Any, name: str, partition: str, key: Any) -> None:
    """Best effort, after an acquire: the registry only feeds operators' listings."""
    if not _due(name, partition):
        return
    with suppress(*OUTAGE_ERRORS):
        pipe = client.pipeline(transaction=False)
        _queue_writes(pipe, name, partition, key)
        pipe.execute()
        _remember(name, partition)


async def arecord(client: Any, name: str, partition: str, key: Any) -> None:
    if not _due(name, partition):
        return
    with suppress(*OUTAGE_ERRORS):
        pipe = client.pipeline(transaction=False)
        _queue_writes(pipe, name, partition, key)
        await pipe.execute()
        _remember(name, partition)


def read(client: Any, name: str) -> dict[str, str]:
    """Partition hash -> key label, pruning partitions whose keys have expired."""
    registry = registry_key(name)
    raw = {_text(k): _text(v) for k, v in client.hgetall(registry).items()}
    if not raw:
        return {}
    pipe = client.pipeline(transaction=False)
    for partition in raw:
        pipe.exists(SemaphoreKeys.build(key_prefix(), name, partition).state)
    gone = [partition for partition, exists in zip(raw, pipe.execute(), strict=True) if not exists]
    if gone:
        client.hdel(registry, *gone)
    return {partition: label for partition, label in raw.items() if partition not in gone}


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)
