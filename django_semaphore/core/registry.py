"""Which partitions a keyed semaphore has, without SCAN over the keyspace, and how many it may keep.

A partition's keys live in its own cluster slot, so no script can record it
in a shared list; each process records a partition it serves, once per half
idle period (not on every acquire), in two keys in the semaphore's name's
slot: a sorted set of partition hashes scored by when they were last
recorded (server clock), and a hash of their labels.

Scored by time, so every read is bounded: the N most recently recorded come
first, a count is ZCARD, and listing them all goes by ZSCAN cursor pages.
Entries not recorded for two idle periods are dropped by score (a partition
in use is recorded at least every half idle period); readers drop the
entries they read whose partition has expired meanwhile.

``max_partitions`` caps the partitions a semaphore keeps: recording a new
one past the cap is refused, and the acquire gets ``TooManyPartitions`` (the
semaphore's ``on_error``). Refusing, not evicting, is what bounds Redis's
memory: a partition's keys live until ``SEMAPHORE_PARTITION_IDLE`` after its
last lease whatever the registry says, so forgetting an old entry to make
room would only hide a partition that still takes memory. When the cap
refuses, the process checks the oldest entries (at most every
``SWEEP_EVERY`` seconds) and drops those whose partition has expired, so room
comes back as soon as partitions actually go.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from typing import Any

from .. import signals
from ..exceptions import TooManyPartitions
from . import scripts
from .calls import ScriptCall
from .conf import SemaphoreConfig, app_setting, key_prefix
from .errors import outages_ignored
from .keys import SemaphoreKeys

LABEL_LIMIT = 200
# Partitions this process has recorded lately, and when; bounded so that a
# per-IP limit under a botnet cannot grow the process without end.
MEMORY = 10_000
_recorded: dict[tuple[str, str], float] = {}
# Threads of one process (gthread workers) record at once; evicting the
# oldest entry reads the dict while another thread may be changing it.
_recorded_lock = threading.Lock()
# Stale entries one recording drops at most (it stays cheap; the next one goes on).
PRUNE_BATCH = 100
# When the cap refuses: how many of the oldest entries are checked for an
# expired partition, and how often (seconds, per process and semaphore).
SWEEP = 100
SWEEP_EVERY = 5.0
_swept: dict[str, float] = {}


def registry_key(name: str) -> str:
    return SemaphoreKeys.partitions_of(key_prefix(), name)


def labels_key(name: str) -> str:
    return SemaphoreKeys.partition_labels_of(key_prefix(), name)


def _forget_ms() -> int:
    return int(app_setting("SEMAPHORE_PARTITION_IDLE") * 2000)


def _due(name: str, partition: str) -> bool:
    seen = _recorded.get((registry_key(name), partition))
    return seen is None or time.monotonic() - seen >= app_setting("SEMAPHORE_PARTITION_IDLE") / 2


def _remember(name: str, partition: str) -> None:
    entry = (registry_key(name), partition)
    with _recorded_lock:
        _recorded.pop(entry, None)
        if len(_recorded) >= MEMORY:
            _recorded.pop(next(iter(_recorded)))
        _recorded[entry] = time.monotonic()


def _sweep_due(name: str) -> bool:
    now = time.monotonic()
    if now - _swept.get(registry_key(name), -SWEEP_EVERY) < SWEEP_EVERY:
        return False
    _swept[registry_key(name)] = now
    return True


def _admit_call(config: SemaphoreConfig, partition: str, key: Any) -> ScriptCall:
    keys = [registry_key(config.name), labels_key(config.name)]
    args = [partition, str(key)[:LABEL_LIMIT], _forget_ms(), config.max_partitions or 0, PRUNE_BATCH]
    return ScriptCall("admit_partition", keys, args)


def _refused(config: SemaphoreConfig, partition: str) -> TooManyPartitions:
    error = TooManyPartitions(
        f"Semaphore {config.name!r} keeps {config.max_partitions} partitions (max_partitions) already; "
        "a new key gets its on_error policy until one of them expires.",
        name=config.name,
        partition=partition,
    )
    signals.emit(signals.semaphore_backend_error, name=config.name, partition=partition, error=error)
    return error


def admit(client: Any, config: SemaphoreConfig, partition: str, key: Any) -> None:
    """Record ``partition`` before it is acquired; raise ``TooManyPartitions`` past the cap.

    An outage here is left to the acquire that follows, which meets it too.
    """
    if not _due(config.name, partition):
        return
    admitted = None
    with outages_ignored():
        call = _admit_call(config, partition, key)
        admitted = bool(scripts.run(client, call))
        if not admitted and _sweep_due(config.name) and _sweep(client, config.name):
            admitted = bool(scripts.run(client, call))
    if admitted is False:
        raise _refused(config, partition)
    if admitted:
        _remember(config.name, partition)


async def aadmit(client: Any, config: SemaphoreConfig, partition: str, key: Any) -> None:
    """``admit`` on an asyncio client."""
    if not _due(config.name, partition):
        return
    admitted = None
    with outages_ignored():
        call = _admit_call(config, partition, key)
        admitted = bool(await scripts.arun(client, call))
        if not admitted and _sweep_due(config.name) and await _asweep(client, config.name):
            admitted = bool(await scripts.arun(client, call))
    if admitted is False:
        raise _refused(config, partition)
    if admitted:
        _remember(config.name, partition)


def _state_key(name: str, partition: str) -> str:
    return SemaphoreKeys.build(key_prefix(), name, partition).state


def _sweep(client: Any, name: str) -> bool:
    """Drop the oldest entries whose partition has expired; True if any went."""
    oldest = [_text(p) for p in client.zrange(registry_key(name), 0, SWEEP - 1)]
    pipe = client.pipeline(transaction=False)
    for partition in oldest:
        pipe.exists(_state_key(name, partition))
    return _forget(client, name, [p for p, alive in zip(oldest, pipe.execute(), strict=True) if not alive])


async def _asweep(client: Any, name: str) -> bool:
    oldest = [_text(p) for p in await client.zrange(registry_key(name), 0, SWEEP - 1)]
    pipe = client.pipeline(transaction=False)
    for partition in oldest:
        pipe.exists(_state_key(name, partition))
    dead = [p for p, alive in zip(oldest, await pipe.execute(), strict=True) if not alive]
    if dead:
        await _forgetting(client, name, dead).execute()
    return bool(dead)


def _forget(client: Any, name: str, gone: list[str]) -> bool:
    if gone:
        _forgetting(client, name, gone).execute()
    return bool(gone)


def _forgetting(client: Any, name: str, gone: list[str]) -> Any:
    """A pipeline dropping ``gone`` from the registry (both keys share a slot: one round trip)."""
    pipe = client.pipeline(transaction=False)
    pipe.zrem(registry_key(name), *gone)
    pipe.hdel(labels_key(name), *gone)
    return pipe


def recent(client: Any, name: str, limit: int) -> dict[str, str]:
    """The ``limit`` partitions recorded most recently, newest first: hash -> label.

    Reads ``limit`` entries and checks only those (their expired partitions
    are dropped here), whatever the registry's size.
    """
    listed = [_text(p) for p in client.zrevrange(registry_key(name), 0, max(limit, 1) - 1)]
    if not listed:
        return {}
    pipe = client.pipeline(transaction=False)
    pipe.hmget(labels_key(name), listed)
    for partition in listed:
        pipe.exists(_state_key(name, partition))
    labels, *alive = pipe.execute()
    _forget(client, name, [p for p, exists in zip(listed, alive, strict=True) if not exists])
    return {p: _text(label or "") for p, label, exists in zip(listed, labels, alive, strict=True) if exists}


def count(client: Any, name: str) -> int:
    """Partitions recorded in the last two idle periods: at least all those alive."""
    return int(client.zcard(registry_key(name)))


def label(client: Any, name: str, partition: str) -> str | None:
    """The label of a registered partition, None if the registry does not know it."""
    value = client.hget(labels_key(name), partition)
    return None if value is None else _text(value)


def pages(client: Any, name: str, size: int) -> Iterator[dict[str, str]]:
    """Every registered partition, by ZSCAN cursor: one bounded page (hash -> label) per round trip or two.

    As with any SCAN, an entry may come twice, and one recorded meanwhile
    may be missed.
    """
    cursor = 0
    while True:
        cursor, entries = client.zscan(registry_key(name), cursor, count=size)
        found = [_text(partition) for partition, _score in entries]
        if found:
            yield dict(zip(found, (_text(v or "") for v in client.hmget(labels_key(name), found)), strict=True))
        if not cursor:
            return


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)
