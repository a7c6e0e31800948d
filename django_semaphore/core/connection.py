"""Where the Redis clients come from.

``SEMAPHORE_CONNECTION`` is a cache alias (the default, so the app shares the
site's pool: django-redis's, Sentinel set-up included, or Django's own
``RedisCache``'s, see ``cache_backends``), a ``redis://`` URL, or a callable
(or its dotted path) returning a redis-py client: the way in for a
``RedisCluster``, which django-redis cannot hand out.

The asyncio client is built per event loop, because redis.asyncio
connections belong to the loop that opened them, and closed when that loop
shuts down: under WSGI, Django runs each async view in a loop of its own.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import threading
import weakref
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from typing import Any

import redis
import redis.asyncio
import redis.asyncio.cluster
import redis.asyncio.connection
import redis.asyncio.retry
import redis.asyncio.sentinel
import redis.sentinel
from django.core.exceptions import ImproperlyConfigured
from django.utils.module_loading import import_string
from redis.backoff import NoBackoff

from .cache_backends import cache_client
from .clients import AsyncClient, SyncClient
from .conf import app_setting

# Connection options that mean the same to redis-py's sync and asyncio pools.
_SHARED_OPTIONS = (
    "host",
    "port",
    "db",
    "username",
    "password",
    "socket_timeout",
    "socket_connect_timeout",
    "client_name",
    "protocol",
    "path",
)

# TLS options: every one the asyncio SSL connection takes (redis-py's sync client has the same names;
# OCSP checks, which only the sync one has, cannot be carried over).
_TLS_OPTIONS = tuple(
    name
    for name in inspect.signature(redis.asyncio.connection.SSLConnection.__init__).parameters
    if name.startswith("ssl_")
)

_url_clients: dict[str, redis.Redis] = {}
_url_lock = threading.Lock()


@dataclass
class _LoopClients:
    """The asyncio clients of one event loop, and what closes them when the loop shuts down."""

    clients: dict[str | int, AsyncClient] = field(default_factory=dict)
    closer: AsyncIterator[None] | None = None


_async_clients: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, _LoopClients] = weakref.WeakKeyDictionary()
_ready_clusters: weakref.WeakSet[redis.asyncio.cluster.RedisCluster] = weakref.WeakSet()


def _factory(setting: object) -> Callable[[], Any] | None:
    if callable(setting):
        return setting
    if isinstance(setting, str) and "://" not in setting and "." in setting:
        try:
            factory: Callable[[], Any] = import_string(setting)
            return factory
        except ImportError:
            return None
    return None


def get_client() -> SyncClient:
    """The sync client (``redis.Redis`` or ``redis.RedisCluster``)."""
    setting = app_setting("SEMAPHORE_CONNECTION")
    factory = _factory(setting)
    if factory is not None:
        client: SyncClient = factory()  # a redis-py client, as the setting promises
        return client
    if not isinstance(setting, str):
        raise ImproperlyConfigured("SEMAPHORE_CONNECTION must be a cache alias, a redis URL or a client factory.")
    if "://" in setting:
        with _url_lock:
            if setting not in _url_clients:
                _url_clients[setting] = redis.Redis.from_url(setting)
            return _url_clients[setting]
    return cache_client(setting)


def _async_from_sync(client: SyncClient) -> AsyncClient:
    """An asyncio client reaching the same server as a sync ``redis.Redis``."""
    pool = getattr(client, "connection_pool", None)
    if pool is None:
        raise ImproperlyConfigured(
            "This connection has no asyncio twin; set SEMAPHORE_ASYNC_CONNECTION to a factory "
            "returning a redis.asyncio client."
        )
    kwargs = {k: v for k, v in pool.connection_kwargs.items() if k in _SHARED_OPTIONS}
    kwargs["retry"] = _async_retry(pool.connection_kwargs.get("retry"))
    if issubclass(pool.connection_class, redis.SSLConnection):  # a rediss:// cache, Sentinel's included
        kwargs["ssl"] = True
        kwargs.update((k, v) for k, v in pool.connection_kwargs.items() if k in _TLS_OPTIONS)
    if isinstance(pool, redis.sentinel.SentinelConnectionPool):
        return _async_sentinel_master(pool, kwargs)
    if "path" in kwargs:
        kwargs["unix_socket_path"] = kwargs.pop("path")
    return redis.asyncio.Redis(**kwargs)


def _async_retry(sync_retry: Any) -> redis.asyncio.retry.Retry:
    """As many retries as the sync client makes (django-redis pools: none).

    redis.asyncio's own default retries ten times, which would turn one
    socket timeout on a hung Redis into eleven for every async view.
    """
    retries = getattr(sync_retry, "_retries", 0) if sync_retry is not None else 0
    return redis.asyncio.retry.Retry(NoBackoff(), retries)


def _async_sentinel_master(pool: redis.sentinel.SentinelConnectionPool, kwargs: dict[str, Any]) -> redis.asyncio.Redis:
    """The asyncio twin of a Sentinel-managed pool: it asks the same sentinels for the master.

    Copying host and port would pin the asyncio client to whichever server
    was master when it was built, and a failover would strand it.
    """
    manager = pool.sentinel_manager
    addresses = []
    for sentinel in manager.sentinels:
        options = sentinel.connection_pool.connection_kwargs
        addresses.append((options["host"], options["port"]))
    sentinel_kwargs = {
        k: v for k, v in manager.sentinel_kwargs.items() if k in _SHARED_OPTIONS or k in _TLS_OPTIONS or k == "ssl"
    }
    kwargs.pop("host", None)
    kwargs.pop("port", None)
    # redis-py leaves master_for unannotated; it returns its redis_class, redis.asyncio.Redis by default.
    master: redis.asyncio.Redis = redis.asyncio.sentinel.Sentinel(
        addresses, sentinel_kwargs=sentinel_kwargs, **kwargs
    ).master_for(pool.service_name)
    return master


def get_async_client() -> AsyncClient:
    """The asyncio client for the running event loop."""
    loop = asyncio.get_running_loop()
    setting = app_setting("SEMAPHORE_ASYNC_CONNECTION") or app_setting("SEMAPHORE_CONNECTION")
    per_loop = _async_clients.setdefault(loop, _LoopClients()).clients
    cache_key = setting if isinstance(setting, str) else id(setting)
    client = per_loop.get(cache_key)
    if client is None:
        explicit = app_setting("SEMAPHORE_ASYNC_CONNECTION")
        factory = _factory(explicit) if explicit is not None else None
        if factory is not None:
            client = factory()
        elif isinstance(setting, str) and "://" in setting:
            client = redis.asyncio.Redis.from_url(setting)
        else:
            client = _async_from_sync(get_client())
        per_loop[cache_key] = client
    return client


async def aclient() -> AsyncClient:
    """``get_async_client()``, made ready for concurrent use.

    An asyncio ``RedisCluster`` that many tasks use before its first command
    has mapped the slots can break connections mid-handshake (seen with
    redis-py 8.1), so it is initialised once, up front, per event loop.
    """
    client = get_async_client()
    loop_clients = _async_clients[asyncio.get_running_loop()]
    if loop_clients.closer is None:
        loop_clients.closer = _closed_at_shutdown(loop_clients.clients)
        await anext(loop_clients.closer)
    if isinstance(client, redis.asyncio.cluster.RedisCluster) and client not in _ready_clusters:
        await client.initialize()
        _ready_clusters.add(client)
    return client


async def _closed_at_shutdown(clients: dict[str | int, AsyncClient]) -> AsyncIterator[None]:
    """Close ``clients`` when their event loop shuts down.

    asyncio has no "loop closing" callback, but ``asyncio.run`` (which asgiref
    uses to run an async view under WSGI, one loop per request) and ASGI
    servers finalise the loop's suspended async generators before closing it
    (``loop.shutdown_asyncgens()``). Suspended here, this one is finalised then,
    and closes the clients' connections instead of leaving them to the garbage
    collector, one per request.
    """
    try:
        yield
    finally:
        for client in list(clients.values()):
            with contextlib.suppress(redis.RedisError, OSError):
                await client.aclose()
        clients.clear()


def socket_timeout(client: SyncClient | AsyncClient) -> float | None:
    """The client's read timeout, so a blocking wait never outlasts it."""
    if hasattr(client, "get_connection_kwargs"):  # RedisCluster, sync and asyncio
        kwargs = client.get_connection_kwargs()
    else:
        pool = getattr(client, "connection_pool", None)
        kwargs = getattr(pool, "connection_kwargs", None) or {}
    value = kwargs.get("socket_timeout")
    return float(value) if value else None
