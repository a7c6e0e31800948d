"""Browsing a keyed semaphore's partitions: the most recent, how many, each one's key and status.

A base of ``Semaphore`` (core/semaphore.py). Keys a client chooses can make
millions of partitions, so every read here is bounded: the most recently used
first, a count, or cursor pages (core/registry.py keeps the registry).
"""

from __future__ import annotations

from collections.abc import Iterator

from . import registry, scripts, vanished
from .calls import Calls
from .conf import SemaphoreConfig
from .connection import get_client, translated
from .replies import SemaphoreStatus


class PartitionBrowsing:
    """The partitions of one keyed semaphore, as its registry records them."""

    name: str
    partition: str | None
    config: SemaphoreConfig

    def partitions(self, limit: int = 1000) -> dict[str, str]:
        """A keyed semaphore's partitions used most recently, newest first: hash -> key (shortened).

        At most ``limit``: keys a client chooses can make millions, and this
        read must not grow with them. ``partition_count()`` says how many
        there are, ``iter_partitions()`` pages through them all. Entries read
        whose partition has expired (idle longer than
        ``SEMAPHORE_PARTITION_IDLE``) are pruned from the registry here.
        """
        with translated(self.name, self.partition):
            return registry.recent(get_client(), self.name, limit)

    def partition_count(self) -> int:
        """How many partitions the registry holds (recorded within two idle periods)."""
        with translated(self.name, self.partition):
            return registry.count(get_client(), self.name)

    def partition_label(self, partition: str) -> str | None:
        """The key of a registered partition, by hash; None if the registry does not know it."""
        with translated(self.name, self.partition):
            return registry.label(get_client(), self.name, partition)

    def iter_partitions(self, page: int = 1000) -> Iterator[tuple[str, str]]:
        """Every registered partition (hash, key), read in cursor pages of about ``page``."""
        seen: set[str] = set()
        with translated(self.name, self.partition):
            for listed in registry.pages(get_client(), self.name, page):
                for partition, label in listed.items():
                    if partition not in seen:
                        seen.add(partition)
                        yield partition, label

    def partition_statuses(
        self, max_partitions: int = 1000, max_holders: int = 100, *, partitions: list[str] | None = None
    ) -> list[SemaphoreStatus]:
        """The status of each known partition of a keyed semaphore, pipelined.

        One round trip for all of them, so a dashboard of a per-user limit
        does not cost one call per user; ``max_partitions`` bounds the work.
        Pass ``partitions`` (hashes) when ``partitions()`` was just read.
        """
        known = list(self.partitions(max_partitions)) if partitions is None else partitions
        parts = known[:max_partitions]
        with translated(self.name, self.partition):
            calls = [Calls.of(self.config, part).status(max_holders, False) for part in parts]
            replies = scripts.run_pipeline(get_client(), calls)
        for part, reply in zip(parts, replies, strict=True):
            if isinstance(reply, Exception):
                raise reply
            vanished.report_status(self.name, part, reply)
        return [
            SemaphoreStatus.parse(self.name, part, self.config.limit, reply)
            for part, reply in zip(parts, replies, strict=True)
        ]
