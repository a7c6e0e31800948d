"""The Redis clients the engine runs on, named as types.

``SEMAPHORE_CONNECTION`` hands out one of redis-py's sync clients and
``SEMAPHORE_ASYNC_CONNECTION`` one of its asyncio clients: a single server
(a Sentinel-managed master is a plain ``Redis`` too) or a Cluster. The
engine branches on which where the two differ (a Cluster has no single
pool). A module of its own that imports only redis-py, so that every room
can name the clients without importing the place they come from
(core/connection.py).
"""

from __future__ import annotations

from typing import TypeAlias

import redis
import redis.asyncio
import redis.asyncio.cluster
import redis.cluster

SyncClient: TypeAlias = redis.Redis | redis.cluster.RedisCluster
AsyncClient: TypeAlias = redis.asyncio.Redis | redis.asyncio.cluster.RedisCluster
