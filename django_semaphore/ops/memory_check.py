"""What the semaphore server's eviction policy puts at risk: E019, W006, W007, W010 (deployment checks).

Eviction is per server. Once ``maxmemory`` is reached, Redis makes room by
its ``maxmemory-policy``: ``allkeys-*`` may evict any key, a semaphore's
holders and state included, so permits vanish while they are held and more
than the limit get in, silently; ``volatile-*`` evicts keys with an expiry,
which a whole semaphore's holders and state never have but a keyed
semaphore's partitions and every waiting line do; ``noeviction`` refuses
writes instead, the semaphores' as well as a cache's, so a server the cache
fills refuses every acquire (guarded requests then follow ``on_error``).

Read with ``INFO memory`` (``CONFIG GET`` when that is refused). The
docs' least-privilege ACL lines grant ``+info|memory`` for it (never
``+config|get``, which reads the server's passwords too); a user denied
both gets W010, a warning whose hint is the line that grants it (a server
that refuses them to every user, as managed services may, gets where else
to look). Nothing is said when ``maxmemory`` is 0 (nothing is evicted), nor
about a server Redis cannot be reached on (E015 says that). Registered with
E015 under the ``django_semaphore_redis`` tag.

- E019 ``allkeys-*`` with a ``maxmemory``.
- W006 ``volatile-*`` with a ``maxmemory`` (names the keyed semaphores).
- W007 ``noeviction`` with a ``maxmemory`` on a server a cache alias of
  ``CACHES`` also uses (``SEMAPHORE_CONNECTION`` is ``"default"``, or another
  alias's ``LOCATION`` names the same host and port).
- W010 the policy could not be read.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping
from typing import Any
from urllib.parse import urlparse

import redis
from django.conf import settings
from django.core.checks import CheckMessage, Error, Warning
from redis.cluster import RedisCluster

from ..core.checks import APP
from ..core.clients import SyncClient
from ..core.conf import app_setting
from ..core.connection import get_client
from ..core.errors import is_acl_refusal, is_outage, reason
from .acl_denials import acl_name, user_of
from .redis_check import settings_sound

# The narrowest grant that reads the policy on Redis 6.2, 7 and Valkey 8 (tests/ops/test_acl_lines.py).
READ_POLICY = "+info|memory"
EVICTS_ANY_KEY = ("allkeys-lru", "allkeys-lfu", "allkeys-random")
EVICTS_EXPIRING_KEYS = ("volatile-lru", "volatile-lfu", "volatile-random", "volatile-ttl")
HINT = (
    "Point SEMAPHORE_CONNECTION at a Redis server of the semaphores' own, run with maxmemory-policy noeviction "
    "(eviction is per server: another database number on the same server does not help); see the docs, "
    "install.md (Where the permits live)."
)


def check_eviction_policy(app_configs: Any = None, **kwargs: Any) -> list[CheckMessage]:
    if not settings_sound():
        return []  # a wrong connection setting is reported by its own check
    try:
        client = get_client()
        servers = _memory_settings(client)
    except _Refused as refused:
        return [_unreadable(client, refused.info, refused.config)]
    except redis.RedisError as exc:
        if is_outage(exc):
            return []  # unreachable, or no connection can be made: E015 says so
        return [_unreadable(client, exc)]
    evicting = [(maxmemory, policy, human) for maxmemory, policy, human in servers if maxmemory > 0]
    for policies, build in ((EVICTS_ANY_KEY, _any_key), (EVICTS_EXPIRING_KEYS, _expiring_keys)):
        for _maxmemory, policy, human in evicting:
            if policy in policies:
                return [build(policy, human)]
    shared = _caches_on_the_same_server(client)
    for _maxmemory, policy, human in evicting:
        if policy == "noeviction" and shared:
            return [_full_cache_refuses(shared, human)]
    return []


class _Refused(Exception):
    """The server refused both ways of reading the policy."""

    def __init__(self, info: redis.ResponseError, config: redis.ResponseError) -> None:
        super().__init__(str(config))
        self.info = info
        self.config = config


def _memory_settings(client: SyncClient) -> list[tuple[int, str, str]]:
    """(maxmemory in bytes, maxmemory-policy, maxmemory as Redis prints it) of each server behind ``client``."""
    try:
        found = _per_server(client, lambda c, **k: c.info("memory", **k))
        return [
            (int(info.get("maxmemory", 0)), str(info.get("maxmemory_policy", "")), str(info.get("maxmemory_human", "")))
            for info in found
        ]
    except redis.ResponseError as info_refused:
        try:
            found = _per_server(client, lambda c, **k: c.config_get("maxmemory*", **k))
        except redis.ResponseError as config_refused:
            raise _Refused(info_refused, config_refused) from config_refused
        return [
            (int(config.get("maxmemory", 0)), str(config.get("maxmemory-policy", "")), str(config.get("maxmemory")))
            for config in found
        ]


def _per_server(client: SyncClient, read: Callable[..., Any]) -> list[Mapping[str, Any]]:
    """``read`` on the one server, or on every primary of a Redis Cluster."""
    if isinstance(client, RedisCluster):
        replies = read(client, target_nodes=RedisCluster.PRIMARIES)
        if isinstance(replies, Mapping) and all(isinstance(v, Mapping) for v in replies.values()):
            return list(replies.values())
        return [replies]
    return [read(client)]


def _any_key(policy: str, human: str) -> CheckMessage:
    return Error(
        f"The semaphores' Redis evicts any key once it is full (maxmemory-policy {policy}, maxmemory {human}): a "
        "semaphore's holders, state and limit override can vanish while permits are held, and more requests than "
        "the limit then get in, with no error (the engine logs it afterwards when it can tell).",
        hint=HINT,
        id=f"{APP}.E019",
    )


def _expiring_keys(policy: str, human: str) -> CheckMessage:
    keyed = _keyed_semaphores()
    named = ", ".join(repr(name) for name in keyed) if keyed else "none declared in SEMAPHORES now"
    return Warning(
        f"The semaphores' Redis evicts keys with an expiry once it is full (maxmemory-policy {policy}, maxmemory "
        f"{human}): whole semaphores are safe (their holders and state never expire), but the partitions of keyed "
        f"semaphores ({named}, and any your code calls with key=) and every waiting line can vanish: a "
        "partition's permits lost, so more than its limit inside, and waiters losing their place.",
        hint=HINT,
        id=f"{APP}.W006",
    )


def _full_cache_refuses(aliases: list[str], human: str) -> CheckMessage:
    caches = ", ".join(repr(alias) for alias in aliases)
    return Warning(
        f"The semaphores' Redis is also the cache {caches} (maxmemory {human}, maxmemory-policy noeviction): once "
        "the cache fills it, Redis refuses every write, every acquire included, and guarded requests follow their "
        "on_error ('allow' runs them with no limit at all, 'deny' answers 503) until cache entries expire.",
        hint=HINT,
        id=f"{APP}.W007",
    )


def _unreadable(client: SyncClient, error: BaseException, config_error: BaseException | None = None) -> CheckMessage:
    said = f"INFO memory: {reason(error)}; CONFIG GET: {reason(config_error)}" if config_error else reason(error)
    if is_acl_refusal(error):
        hint = (
            f"Let the connection's user read INFO's memory section: {_grant_line(client)} (on Redis 6.2 and later, "
            "Valkey; where that form is refused, +info); see the docs, servers.md (Least-privilege ACL users)."
        )
    else:
        hint = (
            "This server refuses INFO and CONFIG GET to every user (some managed services do): read maxmemory-policy "
            "in the provider's console or parameter group, make it noeviction on a server of the semaphores' own, "
            "then silence this warning (SILENCED_SYSTEM_CHECKS)."
        )
    return Warning(
        f"Could not read the maxmemory-policy of the semaphores' Redis ({said}), so E019, W006 and W007 cannot "
        "tell: under an evicting policy (allkeys-*, volatile-*) permits can vanish while held and more requests "
        "than the limit get in; under noeviction on a server a cache shares, a full cache refuses every acquire.",
        hint=hint,
        id=f"{APP}.W010",
    )


def _grant_line(client: SyncClient) -> str:
    """The ACL line that lets the connection's user read the policy, and only INFO's memory section."""
    return f"ACL SETUSER {acl_name(user_of(client))} {READ_POLICY}"


def _keyed_semaphores() -> list[str]:
    """Names of the semaphores that make partitions: keyed in SEMAPHORES or by a middleware rule."""
    declared = getattr(settings, "SEMAPHORES", None) or {}
    names = [name for name, options in declared.items() if isinstance(options, Mapping) and options.get("key")]
    rules = getattr(settings, "SEMAPHORE_MIDDLEWARE_RULES", None) or []
    for rule in rules if isinstance(rules, (list, tuple)) else []:
        if isinstance(rule, Mapping) and rule.get("key") and rule.get("semaphore") not in names:
            names.append(str(rule.get("semaphore")))
    return names


def _caches_on_the_same_server(client: SyncClient) -> list[str]:
    """Cache aliases whose server is the semaphores' one (by host and port, or socket path)."""
    setting = app_setting("SEMAPHORE_CONNECTION")
    caches = getattr(settings, "CACHES", {}) or {}
    shared = ["default"] if setting == "default" and "default" in caches else []
    pool = getattr(client, "connection_pool", None)
    kwargs = getattr(pool, "connection_kwargs", None) or {}
    ours = _address(kwargs.get("host"), kwargs.get("port"), kwargs.get("path"))
    if ours is None:
        return shared
    for alias, cache in caches.items():
        if alias in shared or alias == setting or not isinstance(cache, Mapping):
            continue
        if ours in (_location_address(location) for location in _locations(cache.get("LOCATION"))):
            shared.append(alias)
    return shared


def _locations(location: object) -> Iterable[str]:
    if isinstance(location, str):
        return re.split("[;,]", location)[:1]
    if isinstance(location, (list, tuple)) and location and isinstance(location[0], str):
        return [location[0]]
    return []


def _location_address(location: str) -> tuple[str, int] | str | None:
    url = urlparse(location.strip())
    if url.scheme == "unix":
        return url.path or None
    return _address(url.hostname, url.port, None)


def _address(host: object, port: int | str | None, path: object) -> tuple[str, int] | str | None:
    if path:
        return str(path)
    if not host:
        return None
    return (str(host), int(port) if port else 6379)
