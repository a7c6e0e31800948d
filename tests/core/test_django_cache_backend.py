"""``SEMAPHORE_CONNECTION`` naming an alias of Django's own ``django.core.cache.backends.redis.RedisCache``.

Many sites use Django's built-in Redis cache and never install django-redis's
backend: the semaphores share that cache's connection pool, sync and asyncio,
with the same system checks as a django-redis alias.
"""

from __future__ import annotations

import asyncio
from types import SimpleNamespace

import pytest
import redis
from django.core.cache import caches

from django_semaphore import checks
from django_semaphore.core import connection
from django_semaphore.core.bounded import socket_timeout
from django_semaphore.core.connection import get_async_client, get_client
from django_semaphore.ops import redis_check
from django_semaphore.testing import RedisServer, free_port

from ..ops.test_checks import ids

BUILT_IN = "django.core.cache.backends.redis.RedisCache"


@pytest.fixture
def built_in_cache(redis_server: RedisServer, settings) -> str:
    """An alias of Django's own Redis cache on database 3 of the suite's server, with short timeouts."""
    location = redis_server.url.rsplit("/", 1)[0] + "/3"
    settings.CACHES = {
        **settings.CACHES,
        "builtin": {
            "BACKEND": BUILT_IN,
            "LOCATION": location,
            "OPTIONS": {"socket_timeout": 2, "socket_connect_timeout": 0.5},
        },
    }
    settings.SEMAPHORE_CONNECTION = "builtin"
    return "builtin"


def test_permits_live_in_the_caches_server_and_share_its_pool(built_in_cache: str, key_prefix: str) -> None:
    from django_semaphore import get_semaphore

    client = get_client()
    assert client.connection_pool is caches[built_in_cache]._cache.get_client(write=True).connection_pool
    assert socket_timeout(client) == 2
    permit = get_semaphore("single").acquire()
    assert permit is not None
    caches[built_in_cache].set("page", "cached")
    with redis.Redis(connection_pool=client.connection_pool) as same_database:
        assert same_database.exists(f"{key_prefix}{{single}}:holders")
        assert same_database.connection_pool.connection_kwargs["db"] == 3
    assert get_semaphore("single").acquire() is None
    permit.release()


def test_the_async_client_reaches_the_same_database(built_in_cache: str, key_prefix: str) -> None:
    from django_semaphore import get_semaphore

    async def scenario() -> None:
        client = get_async_client()
        assert client.connection_pool.connection_kwargs["db"] == 3
        permit = await get_semaphore("single").aacquire()
        assert permit is not None
        assert await client.exists(f"{key_prefix}{{single}}:holders")
        assert await get_semaphore("single").aacquire() is None
        await permit.arelease()

    asyncio.run(scenario())


def test_a_cache_hiding_its_pool_gets_a_client_built_from_location_and_options() -> None:
    # A subclass whose internals differ: the client comes from what its settings say instead.
    cache = SimpleNamespace(
        _servers=["redis://127.0.0.1:6390", "redis://127.0.0.1:6391"],
        _options={"socket_timeout": 1.5, "serializer": "x.Serializer", "db": 5},
    )
    client = connection.built_in_client(cache)
    kwargs = client.connection_pool.connection_kwargs
    assert (kwargs["port"], kwargs["db"], kwargs["socket_timeout"]) == (6390, 5, 1.5)  # the first server: writes


def test_the_checks_accept_the_built_in_backend(built_in_cache: str, settings) -> None:
    assert checks.check_connection() == []
    assert redis_check.check_redis_reachable() == []
    bare = {**settings.CACHES[built_in_cache], "OPTIONS": {}}
    settings.CACHES = {**settings.CACHES, built_in_cache: bare}
    assert ids(checks.check_connection()) == ["django_semaphore.W001"]
    timeouts_in_the_url = {**bare, "LOCATION": bare["LOCATION"] + "?socket_timeout=2&socket_connect_timeout=0.5"}
    settings.CACHES = {**settings.CACHES, built_in_cache: timeouts_in_the_url}
    assert checks.check_connection() == []


def test_e015_reports_a_built_in_cache_whose_server_is_down(built_in_cache: str, settings) -> None:
    down = {**settings.CACHES[built_in_cache], "LOCATION": f"redis://127.0.0.1:{free_port()}/0"}
    settings.CACHES = {**settings.CACHES, built_in_cache: down}
    assert ids(redis_check.check_redis_reachable()) == ["django_semaphore.E015"]
