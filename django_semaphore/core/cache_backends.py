"""The Redis client behind a cache alias: django-redis's backend, or Django's own ``RedisCache``.

Sites on Django 4.0+ often use ``django.core.cache.backends.redis.RedisCache``
and never install django-redis's backend; ``SEMAPHORE_CONNECTION`` may name
either. For Django's backend the semaphores share the cache's connection pool
(the one it writes through: the first server of its ``LOCATION``), taken from
the cache object of the calling thread as Django itself does, so a threaded
server keeps no more connections than its cache already has. A backend that
keeps its pool where we cannot see it (a subclass with other internals) gets a
client built from its ``LOCATION`` and ``OPTIONS`` the way Django builds one.
"""

from __future__ import annotations

import re
import threading
import weakref
from collections.abc import Mapping
from contextlib import suppress
from typing import Any

import redis
from django.core.cache import caches
from django.core.cache.backends.redis import RedisCache as BuiltInRedisCache
from django.core.exceptions import ImproperlyConfigured
from django.utils.module_loading import import_string

DJANGO_REDIS_BACKEND = "django_redis.cache.RedisCache"
BUILT_IN_BACKEND = "django.core.cache.backends.redis.RedisCache"
# Options of Django's backend that are not redis-py connection options.
_NOT_CONNECTION_OPTIONS = ("serializer", "pool_class", "parser_class")

# One client per cache object (Django makes one per thread); dropped with it.
_built_in_clients: weakref.WeakKeyDictionary[Any, redis.Redis] = weakref.WeakKeyDictionary()
_built_in_lock = threading.Lock()


def backend_kind(path: object) -> str | None:
    """ "django-redis" or "built-in" for a cache ``BACKEND`` path (or a subclass of either), else None."""
    if path == DJANGO_REDIS_BACKEND:
        return "django-redis"
    if path == BUILT_IN_BACKEND:
        return "built-in"
    if not isinstance(path, str):
        return None
    backend: Any = None
    with suppress(ImportError):
        backend = import_string(path)
    if isinstance(backend, type) and issubclass(backend, BuiltInRedisCache):
        return "built-in"
    with suppress(ImportError):
        if isinstance(backend, type) and issubclass(backend, import_string(DJANGO_REDIS_BACKEND)):
            return "django-redis"
    return None


def cache_client(alias: str) -> redis.Redis:
    """The sync client writing to the server behind the cache ``alias``."""
    cache = caches[alias]
    if isinstance(cache, BuiltInRedisCache):
        client = _built_in_clients.get(cache)
        if client is None:
            client = _shared_built_in_client(cache)
            with _built_in_lock:
                _built_in_clients[cache] = client
        return client
    from django_redis import get_redis_connection

    try:
        connection: redis.Redis = get_redis_connection(alias, write=True)  # django-redis hands out redis.Redis
        return connection
    except NotImplementedError as exc:
        raise ImproperlyConfigured(
            f"Cache {alias!r} cannot hand out a single Redis client (a sharded django-redis client?)."
        ) from exc


def _shared_built_in_client(cache: BuiltInRedisCache) -> redis.Redis:
    """The client Django's backend writes with (its pool), or one built from its settings."""
    inner = getattr(cache, "_cache", None)
    get = getattr(inner, "get_client", None)
    if callable(get):
        with suppress(TypeError):
            client = get(write=True)
            if isinstance(client, redis.Redis):
                return client
    return built_in_client(cache)


def built_in_client(cache: Any) -> redis.Redis:
    """A client for the first server of a Django ``RedisCache``'s ``LOCATION``, with its ``OPTIONS``."""
    servers = getattr(cache, "_servers", None) or []
    if isinstance(servers, str):
        servers = re.split("[;,]", servers)
    if not servers:
        raise ImproperlyConfigured("A Django RedisCache used for semaphores needs a LOCATION.")
    options: Mapping[str, Any] = getattr(cache, "_options", None) or {}
    pool_class = options.get("pool_class") or redis.ConnectionPool
    if isinstance(pool_class, str):
        pool_class = import_string(pool_class)
    kwargs = {name: value for name, value in options.items() if name not in _NOT_CONNECTION_OPTIONS}
    parser_class = options.get("parser_class")
    if parser_class is not None:
        kwargs["parser_class"] = import_string(parser_class) if isinstance(parser_class, str) else parser_class
    return redis.Redis(connection_pool=pool_class.from_url(servers[0], **kwargs))
