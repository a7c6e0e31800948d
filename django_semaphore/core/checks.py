"""The engine's system checks: the connection and the engine's settings.

Misconfiguration fails at ``manage.py check``, not at the first busy request.
``django_semaphore/checks.py`` registers these, the request path's
(``web/checks.py``), the dashboard's (``dashboard/checks.py``) and the
deployment checks (``ops/redis_check.py``, ``ops/memory_check.py``); the
reference lists every ID (docs/reference/checks.md).

Errors:

- E001 ``SEMAPHORE_CONNECTION`` names a cache alias that ``CACHES`` lacks.
- E002 that cache is neither a django-redis cache nor Django's own ``RedisCache``.
- E003 that cache's client is sharded (no single server to hold a semaphore).
- E004 ``SEMAPHORE_CONNECTION`` is neither an alias, a URL nor an importable factory.
- E005 a ``SEMAPHORES`` entry has a wrong type or range.
- E010 an engine-wide ``SEMAPHORE_*`` setting has a wrong value (``SEMAPHORE_OUTAGE_LOG_INTERVAL`` and
  ``SEMAPHORE_METRICS_FLUSH_INTERVAL`` included).
- E011 ``SEMAPHORE_PARTITION_IDLE`` is not a positive number of seconds.
- E014 ``SEMAPHORE_ASYNC_CONNECTION`` is neither None, a callable nor an importable dotted path.
- E016 an adaptive ``limit`` has a wrong shape, type or range (or a weight above its min).
- E017 a keyed semaphore has an adaptive limit (whole semaphores only).
- E018 a ``SEMAPHORES`` entry or an option dict inside one (an adaptive ``limit``, a
  ``waiting_room``) has a key no option reads (a misspelling): the message names the
  closest known option. At run time such a key is ignored with one warning (a rolling
  deploy may bring a newer release's option to an older process).
- E020 a ``waiting_room`` has a wrong value, or its entry sets what a room cannot
  honour (``key``, a ``weight`` other than 1, ``wait`` > 0, ``fair: False``, an
  adaptive limit, ``replicas``), or bypasses an unsafe method (POST, PUT...) without saying it means to.
- E022 ``stripes`` is not an integer from 1 to 256, or a striped entry has a ``key`` or a
  ``waiting_room``, a limit (an adaptive ``min``) below its stripes, or a ``weight`` above a
  stripe's part of the limit.
- E023 two waiting rooms share one cookie name.

Not checked: ``replicas`` > 0 with a Redis Cluster connection factory, which
only calling the factory (opening a connection) would reveal; the first
acquire raises ``ImproperlyConfigured`` instead.

Warnings:

- W001 the Redis connection has no socket timeout: a hung Redis would hang requests.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from typing import Any, TypeGuard
from urllib.parse import parse_qs, urlparse

from django.conf import settings
from django.core.checks import CheckMessage, Error, Warning
from django.utils.module_loading import import_string

from .adaptive import adaptive_problems, keyed_problem
from .conf import MAX_SECONDS, ON_ERROR_CHOICES, app_setting, option_problems, unknown_option_problems
from .connection import BUILT_IN_BACKEND, DJANGO_REDIS_BACKEND, backend_kind
from .redis_keys import check_prefix
from .room_options import RoomOptions, has_room, room_problems, shared_cookies
from .stripe_options import stripe_problems

APP = "django_semaphore"
SHARDED_CLIENT = "django_redis.client.ShardClient"
UNKNOWN_HINT = "Fix the spelling, or remove the key: it is ignored at run time (see the docs, reference/settings.md)."


def error(number: int, msg: str, hint: str) -> Error:
    """A check error with the app's ID, ``django_semaphore.E0nn``."""
    return Error(msg, hint=hint, id=f"{APP}.E{number:03d}")


def warning(number: int, msg: str, hint: str) -> Warning:
    """A check warning with the app's ID, ``django_semaphore.W0nn``."""
    return Warning(msg, hint=hint, id=f"{APP}.W{number:03d}")


def finite(value: object) -> TypeGuard[float]:
    """A real, finite number (bools and NaN are not)."""
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def seconds(value: object) -> bool:
    """A number of seconds > 0, ten years at most."""
    return finite(value) and 0 < value <= MAX_SECONDS


def importable(path: object) -> bool:
    """A callable, or the dotted path of one."""
    if callable(path):
        return True
    if not isinstance(path, str):
        return False
    try:
        return callable(import_string(path))
    except ImportError:
        return False


def check_connection(app_configs: Any = None, **kwargs: Any) -> list[CheckMessage]:
    setting = app_setting("SEMAPHORE_CONNECTION")
    if callable(setting):
        return []
    if not isinstance(setting, str):
        return [
            error(
                4,
                f"SEMAPHORE_CONNECTION must be a string or a callable, not {type(setting).__name__}.",
                "Use a cache alias from CACHES, a redis:// URL, or the dotted path of a client factory.",
            )
        ]
    if "://" in setting:
        return _timeout_warnings(parse_qs(urlparse(setting).query), setting)
    caches = getattr(settings, "CACHES", {})
    if setting not in caches:
        if "." in setting:
            if importable(setting):
                return []
            return [
                error(
                    4,
                    f"SEMAPHORE_CONNECTION {setting!r} is not a cache alias and does not import a callable.",
                    "Fix the dotted path of the client factory, or use a cache alias or a redis:// URL.",
                )
            ]
        return [
            error(
                1,
                f"SEMAPHORE_CONNECTION names the cache {setting!r}, which CACHES does not define.",
                f"Add {setting!r} to CACHES with BACKEND {DJANGO_REDIS_BACKEND!r} or {BUILT_IN_BACKEND!r}, or "
                "point SEMAPHORE_CONNECTION at an existing alias or a redis:// URL.",
            )
        ]
    cache = caches[setting]
    kind = backend_kind(cache.get("BACKEND"))
    if kind is None:
        return [
            error(
                2,
                f"Cache {setting!r} uses {cache.get('BACKEND')!r}, which cannot hand out a Redis client.",
                f"Use BACKEND {DJANGO_REDIS_BACKEND!r} or {BUILT_IN_BACKEND!r} for this cache, or set "
                "SEMAPHORE_CONNECTION to a redis:// URL.",
            )
        ]
    options = cache.get("OPTIONS") or {}
    if kind == "built-in":
        return _built_in_timeout_warnings(setting, cache.get("LOCATION"), options)
    if options.get("CLIENT_CLASS") == SHARDED_CLIENT:
        return [
            error(
                3,
                f"Cache {setting!r} uses django-redis's ShardClient; a semaphore must live on one server.",
                "Give the semaphores their own cache alias with the DefaultClient, a redis:// URL, or a "
                "factory returning a redis.RedisCluster.",
            )
        ]
    return _timeout_warnings(
        {
            "socket_timeout": [options.get("SOCKET_TIMEOUT")],
            "socket_connect_timeout": [options.get("SOCKET_CONNECT_TIMEOUT")],
        },
        f"cache {setting!r}",
    )


def _built_in_timeout_warnings(alias: str, location: object, options: Mapping[str, Any]) -> list[CheckMessage]:
    """W001 for Django's own RedisCache: redis-py's options, in OPTIONS or in the first server's URL."""
    first = location[0] if isinstance(location, (list, tuple)) and location else location
    found = parse_qs(urlparse(re.split("[;,]", first)[0]).query) if isinstance(first, str) else {}
    for name in ("socket_timeout", "socket_connect_timeout"):
        if options.get(name):
            found[name] = [options[name]]
    return _timeout_warnings(found, f"cache {alias!r}")


def _timeout_warnings(options: Mapping[str, list[Any]], where: str) -> list[CheckMessage]:
    missing = [name for name in ("socket_timeout", "socket_connect_timeout") if not (options.get(name) or [None])[0]]
    if not missing:
        return []
    return [
        warning(
            1,
            f"The semaphore connection ({where}) sets no {' or '.join(missing)}: a hung Redis would hang "
            "every guarded request.",
            "Set short timeouts, e.g. OPTIONS {'SOCKET_CONNECT_TIMEOUT': 0.5, 'SOCKET_TIMEOUT': 2} on a "
            "django-redis cache, {'socket_connect_timeout': 0.5, 'socket_timeout': 2} on Django's own "
            "RedisCache, or ?socket_connect_timeout=0.5&socket_timeout=2 on a URL.",
        )
    ]


def check_engine_settings(app_configs: Any = None, **kwargs: Any) -> list[CheckMessage]:
    """E010 and E014 for the engine's own ``SEMAPHORE_*`` settings (core/conf.py)."""
    messages: list[CheckMessage] = []

    def bad(setting: str, msg: str, hint: str) -> None:
        messages.append(error(10, f"{setting}: {msg}", hint))

    try:
        check_prefix(app_setting("SEMAPHORE_KEY_PREFIX"))
    except ValueError as exc:
        bad("SEMAPHORE_KEY_PREFIX", str(exc), "Use a short prefix such as 'semaphore:'.")
    if app_setting("SEMAPHORE_ON_ERROR") not in ON_ERROR_CHOICES:
        bad("SEMAPHORE_ON_ERROR", f"must be one of {ON_ERROR_CHOICES}.", "See the docs, guides/failure-policy.md.")
    for setting in ("SEMAPHORE_DEFAULT_LEASE", "SEMAPHORE_WAITER_TTL"):
        if not seconds(app_setting(setting)):
            bad(setting, "must be a number of seconds > 0.", "The default is fine for most sites.")
    interval = app_setting("SEMAPHORE_OUTAGE_LOG_INTERVAL")
    if not seconds(interval):
        bad(
            "SEMAPHORE_OUTAGE_LOG_INTERVAL",
            f"must be a number of seconds > 0, not {interval!r}.",
            "It is how often a Redis outage is summarised in the log; the default, 60, suits most sites.",
        )
    flush = app_setting("SEMAPHORE_METRICS_FLUSH_INTERVAL")
    if flush is not None and not (finite(flush) and 0.05 <= flush <= 3600):
        bad(
            "SEMAPHORE_METRICS_FLUSH_INTERVAL",
            f"must be None or a number of seconds from 0.05 to 3600, not {flush!r}.",
            "It is how often each process writes its metrics counts to Redis; the default, 5, suits most sites.",
        )
    async_connection = app_setting("SEMAPHORE_ASYNC_CONNECTION")
    if async_connection is not None and not importable(async_connection):
        messages.append(
            error(
                14,
                f"SEMAPHORE_ASYNC_CONNECTION {async_connection!r} is neither a callable nor the dotted path of one.",
                "Give a function returning a redis.asyncio client (or its dotted path), or leave it None to "
                "derive the asyncio client from SEMAPHORE_CONNECTION.",
            )
        )
    return messages


def check_partition_idle(app_configs: Any = None, **kwargs: Any) -> list[CheckMessage]:
    # It becomes a PEXPIRE in ms inside the scripts: a garbage value would
    # surface as a Redis error on the first keyed request, or never expire.
    value = app_setting("SEMAPHORE_PARTITION_IDLE")
    if finite(value) and 0.001 <= value <= MAX_SECONDS:
        return []
    return [
        error(
            11,
            f"SEMAPHORE_PARTITION_IDLE must be a positive number of seconds (1 ms to ten years), not {value!r}.",
            "It is how long an idle partition of a keyed semaphore keeps its keys; the default, 86400 "
            "(a day), suits most sites. See the docs, failure-modes.md (Memory).",
        )
    ]


def check_semaphores(app_configs: Any = None, **kwargs: Any) -> list[CheckMessage]:
    raw = getattr(settings, "SEMAPHORES", None) or {}
    if not isinstance(raw, Mapping):
        return [error(5, "SEMAPHORES must be a dict of name -> options.", "See the docs, install.md.")]
    messages: list[CheckMessage] = []
    for name, options in raw.items():
        for problem in option_problems(name, options):
            messages.append(error(5, problem, "See the docs, reference/settings.md."))
        if not isinstance(options, Mapping):
            continue
        messages += [error(18, problem, UNKNOWN_HINT) for problem in unknown_option_problems(name, options)]
        hint = "See the docs, guides/adaptive-limits.md."
        messages += [error(16, problem, hint) for problem in adaptive_problems(name, options)]
        keyed = keyed_problem(name, options)
        if keyed:
            messages.append(error(17, keyed, "Use a fixed limit for a keyed semaphore, or drop its 'key'."))
        hint = "See the docs, guides/waiting-room.md."
        messages += [error(20, problem, hint) for problem in room_problems(name, options)]
        hint = "See the docs, guides/scaling.md (Stripes)."
        messages += [error(22, problem, hint) for problem in stripe_problems(name, options)]
    hint = "Give each room its own 'cookie' (the default, semaphore_room_<name>, is)."
    messages += [error(23, problem, hint) for problem in shared_cookies(_rooms(raw))]
    return messages


def _rooms(raw: Mapping[str, Any]) -> dict[str, RoomOptions]:
    """The declared rooms whose options are valid (a wrong one is E020's), by name."""
    rooms = {}
    for name, options in raw.items():
        if isinstance(options, Mapping) and has_room(options) and not room_problems(name, options):
            room = RoomOptions.from_option(str(name), options.get("waiting_room"))
            if room is not None:
                rooms[str(name)] = room
    return rooms
