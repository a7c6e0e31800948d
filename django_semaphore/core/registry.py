"""Which partitions a keyed semaphore has, without SCAN over the keyspace, and how many it keeps.

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

``max_partitions`` bounds what a semaphore keeps, never who it serves: a new
key is always recorded and served, and when the registry then holds more
than the cap, the oldest entries whose partitions are idle (no holder, no
waiter, no limit override) are evicted: their keys deleted (``evict_partition``),
then their entries dropped (``settle_evictions``). So Redis keeps at most
about ``max_partitions`` idle partitions, plus those in use, and the
dashboard reads at most that many entries. A partition evicted while some
process still remembers recording it is recorded again by that process: its
next acquire finds the partition's keys gone (the reply says "fresh").
``TooManyPartitions`` is no longer raised.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, cast

from . import bounded, scripts
from .bounded import Deadline
from .calls import Calls, ScriptCall
from .clients import AsyncClient, SyncClient
from .conf import SemaphoreConfig, app_setting, key_prefix
from .redis_keys import SemaphoreKeys
from .renewal import renewer

if TYPE_CHECKING:
    from redis.typing import ZSetScoredMembers

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
# Eviction candidates one recording names at most: usually one (the registry was at its cap and
# one came in); more after a burst of partitions that were all in use when they came.
EVICT_BATCH = 8
# An entry whose partition has no keys yet may be a recording whose acquire has not run: it is
# kept this long (ms; at most an idle period). A process whose acquire comes later than that
# after its recording, and finds the partition fresh, records it again.
IN_FLIGHT_MS = 10_000


def registry_key(name: str) -> str:
    return SemaphoreKeys.partitions_of(key_prefix(), name)


def labels_key(name: str) -> str:
    return SemaphoreKeys.partition_labels_of(key_prefix(), name)


def _forget_ms() -> int:
    return int(app_setting("SEMAPHORE_PARTITION_IDLE") * 2000)


def _in_flight_ms() -> int:
    return min(IN_FLIGHT_MS, _forget_ms() // 2)


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


@dataclass(frozen=True)
class Recording:
    """What admitting a partition did before its acquire: whether it was recorded, new, and when."""

    recorded: bool = False
    new: bool = False
    sent_at: float = 0.0

    def must_record_again(self, fresh: bool) -> bool:
        """The acquire found the partition without keys (``fresh``) where this recording cannot explain it.

        Only a new entry, recorded moments before, goes with a fresh
        partition; otherwise the partition was evicted (or expired) since it
        was recorded, and its entry may be gone: it is recorded again.
        """
        if not fresh:
            return False
        return not (self.recorded and self.new) or time.monotonic() - self.sent_at > _in_flight_ms() / 1000


SKIPPED = Recording()


def _admit_call(config: SemaphoreConfig, partition: str, key: Any, *, evicting: bool = True) -> ScriptCall:
    keys = [registry_key(config.name), labels_key(config.name)]
    cap = (config.max_partitions or 0) if evicting else 0
    args = [partition, str(key)[:LABEL_LIMIT], _forget_ms(), cap, PRUNE_BATCH, EVICT_BATCH]
    return ScriptCall("admit_partition", keys, args)


@dataclass
class Eviction:
    """Room to make after a recording: how many entries are wanted gone, and the oldest, in order."""

    now_ms: int
    wanted: int
    candidates: list[tuple[str, int]]  # (hash, score read)
    outcomes: list[Any] = field(default_factory=list)

    @classmethod
    def parse(cls, reply: list[Any]) -> Eviction:
        rest = reply[3:]
        candidates = [(_text(rest[i]), int(rest[i + 1])) for i in range(0, len(rest), 2)]
        return cls(int(reply[1]), int(reply[2]), candidates)

    def next_batch(self) -> list[tuple[str, int]]:
        """The next candidates to try: as many as are still wanted (the oldest first)."""
        tried = len(self.outcomes)
        return self.candidates[tried : tried + max(self.wanted - self._gone(), 0)]

    def _gone(self) -> int:
        """Entries the settle will drop: evicted, or without keys for longer than an admission takes."""
        in_flight = _in_flight_ms()
        return sum(
            1
            for (_partition, score), outcome in zip(self.candidates, self.outcomes, strict=False)
            if outcome == 1 or (outcome == -1 and self.now_ms - score > in_flight)
        )

    def note(self, outcomes: list[Any]) -> None:
        for outcome in outcomes:
            if isinstance(outcome, Exception):
                raise outcome
        self.outcomes += [int(outcome) for outcome in outcomes]

    def settle_call(self, name: str) -> ScriptCall:
        args: list[Any] = [_in_flight_ms()]
        for (partition, score), outcome in zip(self.candidates, self.outcomes, strict=False):
            args += [partition, score, outcome]
        return ScriptCall("settle_evictions", [registry_key(name), labels_key(name)], args)


def _evict_calls(config: SemaphoreConfig, candidates: list[tuple[str, int]]) -> list[ScriptCall]:
    wire = config.wire(True)
    return [
        Calls(SemaphoreKeys.build(key_prefix(), config.name, partition), wire).evict()
        for partition, _score in candidates
    ]


def admit(client: SyncClient, config: SemaphoreConfig, partition: str, key: Any, deadline: Deadline) -> Recording:
    """Record ``partition`` before it is acquired, evicting idle ones past the cap, by ``deadline``.

    An outage raises (the caller's failure policy applies) rather than going
    on to the acquire, which would meet it again: one timeout per request.
    """
    if not _due(config.name, partition):
        return SKIPPED
    sent_at = time.monotonic()
    reply = bounded.run(client, _admit_call(config, partition, key), deadline)
    eviction = Eviction.parse(reply)
    while batch := eviction.next_batch():
        eviction.note(bounded.run_each(client, _evict_calls(config, batch), deadline))
    if eviction.outcomes:
        bounded.run(client, eviction.settle_call(config.name), deadline)
    _remember(config.name, partition)
    return Recording(recorded=True, new=not int(reply[0]), sent_at=sent_at)


async def aadmit(client: AsyncClient, config: SemaphoreConfig, partition: str, key: Any) -> Recording:
    """``admit`` on an asyncio client (its caller ends it at the deadline)."""
    if not _due(config.name, partition):
        return SKIPPED
    sent_at = time.monotonic()
    reply = await scripts.arun(client, _admit_call(config, partition, key))
    eviction = Eviction.parse(reply)
    while batch := eviction.next_batch():
        eviction.note(await scripts.arun_pipeline(client, _evict_calls(config, batch)))
    if eviction.outcomes:
        await scripts.arun(client, eviction.settle_call(config.name))
    _remember(config.name, partition)
    return Recording(recorded=True, new=not int(reply[0]), sent_at=sent_at)


def record_again(config: SemaphoreConfig, partition: str, key: Any) -> None:
    """Record a partition its acquire found evicted, from the background (the request has its answer).

    Without evicting: what it would name is left to the next admission.
    """
    call = _admit_call(config, partition, key, evicting=False)
    renewer.reconcile(call, within=app_setting("SEMAPHORE_PARTITION_IDLE"))
    _remember(config.name, partition)


def _state_key(name: str, partition: str) -> str:
    return SemaphoreKeys.build(key_prefix(), name, partition).state


def _forget(client: SyncClient, name: str, gone: list[str]) -> bool:
    if gone:
        _forgetting(client, name, gone).execute()
    return bool(gone)


def _forgetting(client: SyncClient, name: str, gone: list[str]) -> Any:
    """A pipeline dropping ``gone`` from the registry (both keys share a slot: one round trip)."""
    pipe = client.pipeline(transaction=False)
    pipe.zrem(registry_key(name), *gone)
    pipe.hdel(labels_key(name), *gone)
    return pipe


def recent(client: SyncClient, name: str, limit: int) -> dict[str, str]:
    """The ``limit`` partitions recorded most recently, newest first: hash -> label.

    Reads ``limit`` entries and checks only those (their expired partitions
    are dropped here), whatever the registry's size. An entry without keys
    recorded within an admission's time of the newest one may be an admission
    whose acquire has not run yet: it is kept (its partition, once made, must
    stay under the cap).
    """
    # redis-py types ZREVRANGE's reply for both ways of calling it; WITHSCORES answers the scored one.
    ranked = cast("ZSetScoredMembers", client.zrevrange(registry_key(name), 0, max(limit, 1) - 1, withscores=True))
    scored = [(_text(p), score) for p, score in ranked]
    if not scored:
        return {}
    listed = [partition for partition, _score in scored]
    pipe = client.pipeline(transaction=False)
    pipe.hmget(labels_key(name), listed)
    for partition in listed:
        pipe.exists(_state_key(name, partition))
    labels, *alive = pipe.execute()
    newest = scored[0][1]
    expired = [
        p for (p, score), exists in zip(scored, alive, strict=True) if not exists and newest - score > _in_flight_ms()
    ]
    _forget(client, name, expired)
    return {p: _text(label or "") for p, label, exists in zip(listed, labels, alive, strict=True) if exists}


def count(client: SyncClient, name: str) -> int:
    """Partitions recorded in the last two idle periods: at least all those alive."""
    return int(client.zcard(registry_key(name)))


def label(client: SyncClient, name: str, partition: str) -> str | None:
    """The label of a registered partition, None if the registry does not know it."""
    value = client.hget(labels_key(name), partition)
    return None if value is None else _text(value)


def pages(client: SyncClient, name: str, size: int) -> Iterator[dict[str, str]]:
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
