"""The stricter mode: a grant counts only once ``replicas`` replicas confirm it (``WAIT``).

Set per semaphore (``replicas``, ``replica_timeout``). Each script call that
may grant a permit is followed, on the same connection and in the same round
trip, by ``WAIT``; a permit that too few replicas confirmed within the
timeout is given back, and the caller gets ``BackendUnavailable``: a failover
right then could lose it, and two holders would think they hold one permit.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from django.core.exceptions import ImproperlyConfigured
from redis.asyncio.cluster import RedisCluster as AsyncRedisCluster
from redis.cluster import RedisCluster

from . import signals
from .conf import SemaphoreConfig
from .errors import BackendUnavailable
from .replies import AcquireReply


@dataclass
class ReplicaConfirmation:
    """The stricter mode's ``WAIT``: how many replicas, how long, and how many answered."""

    replicas: int
    timeout_ms: int
    acked: int = 0

    def short(self, reply: AcquireReply) -> bool:
        """A permit was granted but too few replicas have it."""
        return reply.granted and self.acked < self.replicas


def confirmation(config: SemaphoreConfig, client: Any) -> ReplicaConfirmation:
    """What an acquire of ``config``'s semaphore waits for; only a standalone or Sentinel server has replicas to ask."""
    if isinstance(client, (RedisCluster, AsyncRedisCluster)):
        raise ImproperlyConfigured(
            f"SEMAPHORES[{config.name!r}]['replicas'] needs a standalone or Sentinel connection, not Redis Cluster."
        )
    return ReplicaConfirmation(config.replicas, int(config.replica_timeout * 1000))


def unconfirmed(name: str, partition: str | None, confirm: ReplicaConfirmation) -> BackendUnavailable:
    """The error for a permit too few replicas confirmed (already given back), with its signal sent."""
    error = BackendUnavailable(
        f"Only {confirm.acked} of {confirm.replicas} replicas confirmed the permit of semaphore {name!r} "
        f"within {confirm.timeout_ms} ms; it was given back.",
        name=name,
        partition=partition,
    )
    signals.emit(signals.semaphore_backend_error, name=name, partition=partition, error=error)
    return error
