"""Redis key names for one semaphore (or one partition of it).

Every key of a semaphore shares one ``{hash tag}`` so that a script touching
them all stays inside one Redis Cluster slot. Partition keys come from
requests (user ids, IPs, headers), so they are hashed: no user-controlled
text, braces or unbounded length ever reaches a key name.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from functools import cached_property
from typing import overload

NAME_PATTERN = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.\-]{0,99}$")
_PREFIX_FORBIDDEN = re.compile(r"[{}\s]")


def check_name(name: object) -> str:
    """Return ``name`` if it can be used in a key, else raise ValueError."""
    if not isinstance(name, str) or not NAME_PATTERN.match(name):
        raise ValueError(
            f"Semaphore name {name!r} must be 1-100 characters of letters, digits, '_', '.' or '-', "
            "starting with a letter or digit."
        )
    return name


def check_prefix(prefix: object) -> str:
    """Return ``prefix`` if it cannot break the hash tag, else raise ValueError."""
    if not isinstance(prefix, str) or len(prefix) > 100 or _PREFIX_FORBIDDEN.search(prefix):
        raise ValueError(f"Key prefix {prefix!r} must be a string of at most 100 characters without braces or spaces.")
    return prefix


# A key function's value is namespaced as a view's key function's is (web/partition_keys.py, guards.py):
# a view and a function keyed by the same value share a partition, and no value passes for
# another kind's, such as a view's "user:42".
CUSTOM = "custom:"


def hash_partition(value: object) -> str:
    """A fixed-length digest of a partition value, safe to put in a key."""
    text = value if isinstance(value, str) else repr(value) if not isinstance(value, int) else str(value)
    return hashlib.blake2b(text.encode("utf-8", "surrogatepass"), digest_size=16).hexdigest()


class _PartitionKey:
    """``keys.holders``: a key of the partition, its ``base`` and then ``suffix``.

    The suffix is spelled out rather than taken from the attribute's name: a
    key's name is what the data already in Redis is stored under.
    """

    def __init__(self, suffix: str) -> None:
        self.suffix = suffix

    @overload
    def __get__(self, keys: None, owner: type | None = None) -> _PartitionKey: ...

    @overload
    def __get__(self, keys: SemaphoreKeys, owner: type | None = None) -> str: ...

    def __get__(self, keys: SemaphoreKeys | None, owner: type | None = None) -> _PartitionKey | str:
        return self if keys is None else keys.base + self.suffix


def _name_key(suffix: str) -> staticmethod[[str, str], str]:
    """``SemaphoreKeys.tally_of(prefix, name)``: a key of the whole name, in its slot, ``suffix`` after the tag."""

    def of(prefix: str, name: str) -> str:
        return f"{prefix}{{{name}}}:{suffix}"

    return staticmethod(of)


@dataclass(frozen=True)
class SemaphoreKeys:
    """All key names of one semaphore partition."""

    base: str

    @classmethod
    def build(cls, prefix: str, name: str, partition: str | None) -> SemaphoreKeys:
        tag = name if partition is None else f"{name}:{partition}"
        return cls(base=f"{prefix}{{{tag}}}:")

    # A name's keys, in its own slot.
    partitions_of = _name_key("registry")  # its partitions: ZSET hash -> last recorded (ms)
    partition_labels_of = _name_key("labels")  # beside it: HASH hash -> key, shortened
    tally_of = _name_key("tally")  # its counts written by every process (core/tally.py)
    recent_of = _name_key("recent")  # the same counts per 10 s slot of the last hour
    series_of = _name_key("series")  # partitions the metrics name on their own: ZSET hash -> last in use (ms)
    series_labels_of = _name_key("series-labels")  # their keys (core/series.py): HASH hash -> key, shortened
    stripes_of = _name_key("stripes")  # a striped semaphore's last limit change (HASH, core/lua/stripe_plan.lua)

    # The partition's keys every script takes (``common``), and a waiting room's admission samples
    # (``room``: HASH, see core/lua/room.lua).
    holders = _PartitionKey("holders")
    info = _PartitionKey("info")
    state = _PartitionKey("state")
    queue = _PartitionKey("queue")
    alive = _PartitionKey("alive")
    qweight = _PartitionKey("qweight")
    history = _PartitionKey("history")
    room = _PartitionKey("room")

    def room_client(self, client: str) -> tuple[str, str]:
        """A waiting room's client address (hashed, ``hash_partition``): its places, and its bucket of new ones."""
        return f"{self.base}client:{client}", f"{self.base}client-new:{client}"

    @cached_property
    def wake_prefix(self) -> str:
        """What a waiter's wake list's name starts with; its token follows. Built once: it is used on every call."""
        return self.base + "wake:"

    def wake(self, token: str) -> str:
        """The wake list of the waiter ``token``: where a release leaves it a note (see core/lua/common.lua)."""
        return self.wake_prefix + token

    @cached_property
    def common(self) -> list[str]:
        """The keys every script takes, in the order of the argument contract (core/lua/common.lua)."""
        return [self.holders, self.info, self.state, self.queue, self.alive, self.qweight, self.history]
