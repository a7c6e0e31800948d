"""Where the engine's Redis clients come from, and what an outage of them becomes.

``SEMAPHORE_CONNECTION`` is a cache alias (the default, so the app shares the
site's pool: django-redis's, Sentinel set-up included, or Django's own
``RedisCache``'s), a ``redis://`` URL, or a callable (or its dotted path)
returning a redis-py client: the way in for a ``RedisCluster``, which
django-redis cannot hand out.

**Django's own ``RedisCache``.** Sites on Django 4.0+ often use
``django.core.cache.backends.redis.RedisCache`` and never install
django-redis's backend; ``SEMAPHORE_CONNECTION`` may name either. For Django's
backend the semaphores share the cache's connection pool (the one it writes
through: the first server of its ``LOCATION``), taken from the cache object of
the calling thread as Django itself does, so a threaded server keeps no more
connections than its cache already has. A backend that keeps its pool where
we cannot see it (a subclass with other internals) gets a client built from
its ``LOCATION`` and ``OPTIONS`` the way Django builds one.

**asyncio.** The asyncio client is built per event loop, because redis.asyncio
connections belong to the loop that opened them, and closed when that loop
shuts down: under WSGI, Django runs each async view in a loop of its own.

**Outages.** ``translated`` is the one place that decides what an outage is
for the engine: the semaphore, its permits and the background worker all run
their scripts through it (or ``run``/``arun``), and an outage becomes
``BackendUnavailable`` (and the ``semaphore_backend_error`` signal).

**Settings that make no connection.** redis-py builds a client from any
options and refuses them only when it opens a connection (TLS options on a
``redis://`` location: a ``TypeError``), wherever that happens to be. So
``get_client`` and ``get_async_client`` are the one place that turns "no
client can be made from this setting" into ``ConnectionMisconfigured``, a
``ConnectionError``: they make one connection object of each new pool (no
I/O), and whatever building the client raised (a missing cache alias, a
factory's error) becomes that too. Every caller then meets an outage it
already handles: the failure policy, the commands' one line, the
dashboard's and the metrics' 503, E015.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import re
import threading
import weakref
from collections.abc import AsyncIterator, Callable, Mapping
from contextlib import suppress
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any, NoReturn
from urllib.parse import parse_qs, urlsplit, urlunsplit

import redis
import redis.asyncio
import redis.asyncio.cluster
import redis.asyncio.connection
import redis.asyncio.retry
import redis.asyncio.sentinel
import redis.sentinel
from django.core.cache import caches
from django.core.cache.backends.redis import RedisCache as BuiltInRedisCache
from django.core.exceptions import ImproperlyConfigured
from django.core.signals import setting_changed
from django.utils.module_loading import import_string
from redis.backoff import NoBackoff
from redis.exceptions import RedisError

from . import bounded, errors, scripts, signals, tls_contexts
from .calls import ScriptCall
from .clients import AsyncClient, SyncClient
from .conf import app_setting
from .errors import BackendUnavailable, ConnectionMisconfigured
from .outages import outage_log

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
# Sync pools that made a connection object: their options are sound. By pool, not by setting: a cache
# alias hands out one pool per cache object (Django makes one per thread).
_sound_pools: weakref.WeakSet[Any] = weakref.WeakSet()
# The pool last found sound: a process with one pool (a URL, django-redis, a factory sharing one) pays an
# identity test per call, not a look-up in the weak set (which makes a weak reference each time).
_last_sound_pool: Any = None
# Settings (as ``per_loop`` keys them) whose asyncio clients made one: once per setting, not per event loop
# (under WSGI each async view runs in a loop of its own, and a connection object costs about 0.5 ms).
_sound_async: set[str | int] = set()


def _factory(setting: object) -> Callable[[], Any] | None:
    if callable(setting):
        given: Callable[[], Any] = setting
        return given
    if isinstance(setting, str) and "://" not in setting and "." in setting:
        try:
            imported: Callable[[], Any] = import_string(setting)
        except ImportError:
            return None
        return imported
    return None


# The connection settings as last read: asked for on every call, read again when a setting changes.
_settings: dict[str, Any] = {}


def _setting(name: str) -> Any:
    try:
        return _settings[name]
    except KeyError:
        value = _settings[name] = app_setting(name)
        return value


def _forget_settings(**kwargs: Any) -> None:
    _settings.clear()
    _sound_async.clear()


setting_changed.connect(_forget_settings, dispatch_uid="django_semaphore.connection")


def get_client() -> Any:
    """The sync client (``redis.Redis`` or ``redis.RedisCluster``); ``ConnectionMisconfigured`` if none can be made."""
    setting = _setting("SEMAPHORE_CONNECTION")
    try:
        client = _sync_client(setting)
        pool = getattr(client, "connection_pool", None)
        if pool is not _last_sound_pool and pool is not None:
            _sound(pool)
    except Exception as exc:
        _unusable("SEMAPHORE_CONNECTION", setting, exc)
    return client


def _sound(pool: Any) -> None:
    global _last_sound_pool
    if pool not in _sound_pools:
        _can_connect(pool)
        _sound_pools.add(pool)
    _last_sound_pool = pool


def _sync_client(setting: object) -> Any:
    factory = _factory(setting)
    if factory is not None:
        client: SyncClient = factory()  # a redis-py client, as the setting promises
        return client
    if not isinstance(setting, str):
        raise ImproperlyConfigured("SEMAPHORE_CONNECTION must be a cache alias, a redis URL or a client factory.")
    if "://" in setting:
        made = _url_clients.get(setting)
        if made is not None:
            return made
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
    """The asyncio client for the running event loop; ``ConnectionMisconfigured`` if none can be made."""
    loop = asyncio.get_running_loop()
    setting = _setting("SEMAPHORE_ASYNC_CONNECTION") or _setting("SEMAPHORE_CONNECTION")
    per_loop = _async_clients.setdefault(loop, _LoopClients()).clients
    cache_key = setting if isinstance(setting, str) else id(setting)
    client = per_loop.get(cache_key)
    if client is None:
        explicit = _setting("SEMAPHORE_ASYNC_CONNECTION")
        try:
            # Its TLS connections share one SSL context (core/tls_contexts.py), a factory's too.
            client = tls_contexts.share_contexts(_new_async_client(explicit, setting))
            pool = getattr(client, "connection_pool", None)
            if pool is not None and cache_key not in _sound_async:
                _can_connect(pool)
                _sound_async.add(cache_key)
        except Exception as exc:
            _unusable("SEMAPHORE_CONNECTION" if explicit is None else "SEMAPHORE_ASYNC_CONNECTION", setting, exc)
        per_loop[cache_key] = client
    return client


def _new_async_client(explicit: object, setting: object) -> AsyncClient:
    factory = _factory(explicit) if explicit is not None else None
    if factory is not None:
        client: AsyncClient = factory()  # a redis-py asyncio client, as the setting promises
        return client
    if isinstance(setting, str) and "://" in setting:
        return redis.asyncio.Redis.from_url(setting)
    return _async_from_sync(get_client())


# -- settings that make no connection ------------------------------------------------------------


def _can_connect(pool: Any) -> None:
    """Make a connection object of ``pool``'s, as redis-py does before it opens one (no I/O), and drop it.

    That is where redis-py refuses options it does not take, a ``TypeError``
    the first call would otherwise meet in the middle of a request.
    """
    pool.connection_class(**pool.connection_kwargs)


def _unusable(name: str, setting: object, error: Exception) -> NoReturn:
    """Raise what building a client from ``setting`` raised: an outage as it is, anything else as
    ``ConnectionMisconfigured`` (the setting makes no client, so no call reaches Redis)."""
    if isinstance(error, RedisError) and errors.is_outage(error):
        raise error
    raise ConnectionMisconfigured(
        described(name, setting), f"{type(error).__name__}: {error}", _fix(name, setting, error)
    ) from error


def _fix(name: str, setting: object, error: Exception) -> str:
    if "'ssl" in str(error) or (isinstance(setting, str) and _tls_options_in(setting)):
        return (
            "TLS options (ssl_*) need a rediss:// location (or 'ssl': True in CONNECTION_POOL_KWARGS); "
            "see the docs, servers.md (TLS)."
        )
    return (
        f"Fix {name}: a cache alias of CACHES whose OPTIONS redis-py takes, a redis:// or rediss:// URL, "
        "or a factory returning a redis-py client; `manage.py check --deploy` runs the engine through it (E015)."
    )


def _tls_options_in(setting: str) -> bool:
    return setting.startswith("redis://") and any(name.startswith("ssl") for name in parse_qs(urlsplit(setting).query))


def described(name: str, setting: object) -> str:
    """A connection setting as an operator knows it: never a URL's password or query (which may hold one)."""
    if not isinstance(setting, str):
        return f"{name} ({getattr(setting, '__qualname__', type(setting).__name__)})"
    if "://" not in setting:
        return f"{name} {setting!r}"
    url = urlsplit(setting)
    host = url.hostname or ""
    try:
        port = url.port
    except ValueError:  # not a number: the error names it
        port = None
    return f"{name} {urlunsplit((url.scheme, f'{host}:{port}' if port else host, url.path, '', ''))!r}"


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


# -- the client behind a cache alias ---------------------------------------------------------------

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
        shared: redis.Redis = get_redis_connection(alias, write=True)
    except NotImplementedError as exc:
        raise ImproperlyConfigured(
            f"Cache {alias!r} cannot hand out a single Redis client (a sharded django-redis client?)."
        ) from exc
    return shared


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


# -- outages ------------------------------------------------------------------------------------------


class OnExit:
    """A context manager with nothing to do on the way in; subclasses write ``__exit__`` only.

    A class rather than contextlib's generator form: the ones built on it run
    on every guarded call (``translated``, the request path's ``ReleasedOnError``),
    where a generator's frame and its ``contextmanager`` wrapper would cost
    several times as much.
    """

    __slots__ = ()

    def __enter__(self) -> None:
        return None


class translated(OnExit):  # lower case: used as the function it was, ``with translated(name, partition):``
    """Turn an outage of Redis into ``BackendUnavailable`` (and the signal); let bugs through.

    A call Redis answered ends an outage this process is logging (core/outages.py).
    Every acquire and release runs inside one.
    """

    __slots__ = ("name", "partition")

    def __init__(self, name: str, partition: str | None) -> None:
        self.name = name
        self.partition = partition

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, trace: TracebackType | None
    ) -> None:
        if kind is None:
            outage_log.answered()
            return
        if not isinstance(error, RedisError):
            lost = error and errors.lost_mid_command(error)  # redis-py's asyncio I/O, a connection closed under it
            if lost is None:
                return  # a bug, raised as it is
            error = lost
        elif not errors.is_outage(error):
            return  # a bug (a wrong command, a script error), not the server's state: raised as it is
        name, partition = self.name, self.partition
        signals.emit(signals.semaphore_backend_error, name=name, partition=partition, error=error)
        raise BackendUnavailable(
            f"Redis unavailable for semaphore {name!r}: {errors.reason(error)}", name=name, partition=partition
        ) from error


def run(call: ScriptCall, name: str, partition: str | None, client: SyncClient | None = None) -> Any:
    """Run ``call`` on ``client`` (a permit's: the one it was acquired with), or on ``get_client()``."""
    with translated(name, partition):
        return bounded.run(get_client() if client is None else client, call)


async def arun(call: ScriptCall, name: str, partition: str | None) -> Any:
    with translated(name, partition):
        return await scripts.arun(await aclient(), call)
