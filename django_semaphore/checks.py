"""System checks: misconfiguration fails at ``manage.py check``, not at the first busy request.

Errors:

- E001 ``SEMAPHORE_CONNECTION`` names a cache alias that ``CACHES`` lacks.
- E002 that cache is neither a django-redis cache nor Django's own ``RedisCache``.
- E003 that cache's client is sharded (no single server to hold a semaphore).
- E004 ``SEMAPHORE_CONNECTION`` is neither an alias, a URL nor an importable factory.
- E005 a ``SEMAPHORES`` entry has a wrong type or range.
- E006 a key (in ``SEMAPHORES`` or a rule) is of no known kind.
- E007 a middleware rule names a semaphore ``SEMAPHORES`` does not declare.
- E008 a middleware rule names a URL the URLconf does not have.
- E009 a middleware rule is malformed (field, mode, regex, wait, weight).
- E010 an app-wide ``SEMAPHORE_*`` setting has a wrong value (``SEMAPHORE_OUTAGE_LOG_INTERVAL`` included).
- E011 ``SEMAPHORE_PARTITION_IDLE`` is not a positive number of seconds.
- E012 a middleware rule's or a routed view's ``@semaphore`` weight is above the
  semaphore's declared limit (every such request would be turned away).
- E013 ``SEMAPHORE_RATELIMIT_HEADERS`` is not a bool.
- E014 ``SEMAPHORE_ASYNC_CONNECTION`` is neither None, a callable nor an importable dotted path.
- E016 an adaptive ``limit`` has a wrong shape, type or range (or a weight above its min).
- E017 a keyed semaphore has an adaptive limit (whole semaphores only).
- E018 a ``SEMAPHORES`` entry, an option dict inside one (an adaptive ``limit``) or a
  middleware rule has a key no option reads (a misspelling): the message names the
  closest known option. At run time such a key is ignored with one warning (a
  rolling deploy may bring a newer release's option to an older process).

Not checked: ``replicas`` > 0 with a Redis Cluster connection factory, which
only calling the factory (opening a connection) would reveal; the first
acquire raises ``ImproperlyConfigured`` instead.

Warnings:

- W001 the Redis connection has no socket timeout: a hung Redis would hang requests.
- W002 middleware rules are set but ``SemaphoreMiddleware`` is not in ``MIDDLEWARE``.
- W003 ``SemaphoreMiddleware`` runs before ``AuthenticationMiddleware``, so user keys
  and the bypass predicate see no user.
- W004 a semaphore is keyed by a value the client chooses (``header:``, ``get:``, an
  address from a forwarded header; in ``SEMAPHORES`` or a middleware rule) and sets
  no ``max_partitions``: every new value makes a new partition in Redis.
- W005 the admin is installed (so the dashboard is) but ``django.contrib.staticfiles``
  is not: ``collectstatic`` never copies the dashboard's CSS and JS, and they 404.

E015 (Redis unreachable or refusing) is a deployment check, in ``redis_check.py``;
so are E019, W006, W007 and I001 (what the server's eviction policy puts at
risk), in ``memory_check.py``.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any
from urllib.parse import parse_qs, urlparse

from django.conf import settings
from django.core.checks import CheckMessage, Error, Tags, Warning, register
from django.urls import URLPattern, URLResolver, get_resolver
from django.utils.module_loading import import_string

from . import response_log
from .admission import MODES
from .core.adaptive import adaptive_problems, is_adaptive, keyed_problem
from .core.cache_backends import BUILT_IN_BACKEND, DJANGO_REDIS_BACKEND, backend_kind
from .core.conf import MAX_SECONDS, ON_ERROR_CHOICES, app_setting, declared, option_problems, unknown_option_problems
from .core.keys import check_prefix
from .request_keys import client_chosen, key_problem
from .rules import as_strings, rule_problems, unknown_rule_fields, uses_middleware

APP = "django_semaphore"
MIDDLEWARE_PATH = "django_semaphore.middleware.SemaphoreMiddleware"
AUTH_MIDDLEWARE_PATH = "django.contrib.auth.middleware.AuthenticationMiddleware"
SHARDED_CLIENT = "django_redis.client.ShardClient"


def _error(number: int, msg: str, hint: str) -> Error:
    return Error(msg, hint=hint, id=f"{APP}.E{number:03d}")


def _warning(number: int, msg: str, hint: str) -> Warning:
    return Warning(msg, hint=hint, id=f"{APP}.W{number:03d}")


def _number(value: object) -> bool:
    """A real, finite number (bools and NaN are not)."""
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def _importable(path: object) -> bool:
    if callable(path):
        return True
    if not isinstance(path, str):
        return False
    try:
        return callable(import_string(path))
    except ImportError:
        return False


@register(APP)
def check_connection(app_configs: Any = None, **kwargs: Any) -> list[CheckMessage]:
    setting = app_setting("SEMAPHORE_CONNECTION")
    if callable(setting):
        return []
    if not isinstance(setting, str):
        return [
            _error(
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
            if _importable(setting):
                return []
            return [
                _error(
                    4,
                    f"SEMAPHORE_CONNECTION {setting!r} is not a cache alias and does not import a callable.",
                    "Fix the dotted path of the client factory, or use a cache alias or a redis:// URL.",
                )
            ]
        return [
            _error(
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
            _error(
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
            _error(
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
        _warning(
            1,
            f"The semaphore connection ({where}) sets no {' or '.join(missing)}: a hung Redis would hang "
            "every guarded request.",
            "Set short timeouts, e.g. OPTIONS {'SOCKET_CONNECT_TIMEOUT': 0.5, 'SOCKET_TIMEOUT': 2} on a "
            "django-redis cache, {'socket_connect_timeout': 0.5, 'socket_timeout': 2} on Django's own "
            "RedisCache, or ?socket_connect_timeout=0.5&socket_timeout=2 on a URL.",
        )
    ]


@register(APP)
def check_semaphores(app_configs: Any = None, **kwargs: Any) -> list[CheckMessage]:
    raw = getattr(settings, "SEMAPHORES", None) or {}
    if not isinstance(raw, Mapping):
        return [_error(5, "SEMAPHORES must be a dict of name -> options.", "See the docs, install.md.")]
    messages: list[CheckMessage] = []
    for name, options in raw.items():
        problem: str | None
        for problem in option_problems(name, options):
            messages.append(_error(5, problem, "See the docs, reference/settings.md."))
        if not isinstance(options, Mapping):
            continue
        messages += [_error(18, problem, _UNKNOWN_HINT) for problem in unknown_option_problems(name, options)]
        hint = "See the docs, guides/adaptive-limits.md."
        messages += [_error(16, problem, hint) for problem in adaptive_problems(name, options)]
        keyed = keyed_problem(name, options)
        if keyed:
            messages.append(_error(17, keyed, "Use a fixed limit for a keyed semaphore, or drop its 'key'."))
        problem = key_problem(options.get("key")) if isinstance(options.get("key"), str) else None
        if problem:
            messages.append(_error(6, f"SEMAPHORES[{name!r}]['key']: {problem}", _KEY_HINT))
        view = options.get("view")
        if view is not None and not _importable(view):
            messages.append(
                _error(5, f"SEMAPHORES[{name!r}]['view'] {view!r} does not import a view.", "Fix the dotted path.")
            )
    return messages


_UNKNOWN_HINT = "Fix the spelling, or remove the key: it is ignored at run time (see the docs, reference/settings.md)."
_KEY_HINT = "Use 'ip', 'user', 'user_or_ip', 'header:<name>', 'get:<param>', a callable or its dotted path."


@register(APP)
def check_app_settings(app_configs: Any = None, **kwargs: Any) -> list[CheckMessage]:
    messages: list[CheckMessage] = []

    def bad(setting: str, msg: str, hint: str) -> None:
        messages.append(_error(10, f"{setting}: {msg}", hint))

    try:
        check_prefix(app_setting("SEMAPHORE_KEY_PREFIX"))
    except ValueError as exc:
        bad("SEMAPHORE_KEY_PREFIX", str(exc), "Use a short prefix such as 'semaphore:'.")
    if app_setting("SEMAPHORE_ON_ERROR") not in ON_ERROR_CHOICES:
        bad("SEMAPHORE_ON_ERROR", f"must be one of {ON_ERROR_CHOICES}.", "See the docs, guides/failure-policy.md.")
    for setting in ("SEMAPHORE_DEFAULT_LEASE", "SEMAPHORE_WAITER_TTL", "SEMAPHORE_WEB_LEASE", "SEMAPHORE_WEB_MAX_HOLD"):
        value = app_setting(setting)
        if setting == "SEMAPHORE_WEB_MAX_HOLD" and value is None:
            continue  # no bound on how long a request holds its permits
        if not isinstance(value, (int, float)) or isinstance(value, bool) or not 0 < value <= MAX_SECONDS:
            bad(setting, "must be a number of seconds > 0.", "The default is fine for most sites.")
    interval = app_setting("SEMAPHORE_OUTAGE_LOG_INTERVAL")
    if not _number(interval) or not 0 < interval <= MAX_SECONDS:
        bad(
            "SEMAPHORE_OUTAGE_LOG_INTERVAL",
            f"must be a number of seconds > 0, not {interval!r}.",
            "It is how often a Redis outage is summarised in the log; the default, 60, suits most sites.",
        )
    for setting in ("SEMAPHORE_VIEW", "SEMAPHORE_MIDDLEWARE_BYPASS"):
        value = app_setting(setting)
        if value is not None and not _importable(value):
            bad(setting, f"{value!r} does not import a callable.", "Give the dotted path of a function.")
    meta_key = app_setting("SEMAPHORE_IP_META_KEY")
    if not (callable(meta_key) or (isinstance(meta_key, str) and ("." not in meta_key or _importable(meta_key)))):
        bad(
            "SEMAPHORE_IP_META_KEY",
            f"{meta_key!r} is neither a request.META key nor an importable callable.",
            "Use 'REMOTE_ADDR', 'HTTP_X_FORWARDED_FOR' (behind your own proxy), or a function's dotted path.",
        )
    for setting, low in (("SEMAPHORE_TRUSTED_PROXIES", 1), ("SEMAPHORE_IPV6_PREFIX", 1)):
        value = app_setting(setting)
        if not isinstance(value, int) or isinstance(value, bool) or value < low:
            bad(setting, f"must be an integer >= {low}.", "See the docs, guides/keys-and-proxies.md.")
    prefix = app_setting("SEMAPHORE_IPV6_PREFIX")
    if isinstance(prefix, int) and prefix > 128:
        bad("SEMAPHORE_IPV6_PREFIX", "must be at most 128.", "64 groups a client's whole /64.")
    exempt = app_setting("SEMAPHORE_MIDDLEWARE_EXEMPT_PATHS")
    if exempt is not None and not isinstance(exempt, (str, list, tuple)):
        bad(
            "SEMAPHORE_MIDDLEWARE_EXEMPT_PATHS",
            "must be a regex or a list of them.",
            "See the docs, guides/middleware.md.",
        )
        exempt = None
    for pattern in as_strings(exempt):
        try:
            re.compile(pattern)
        except (re.error, TypeError) as exc:
            bad("SEMAPHORE_MIDDLEWARE_EXEMPT_PATHS", f"{pattern!r} is not a regular expression: {exc}.", "Fix it.")
    log_level = getattr(settings, response_log.SETTING, response_log.DEFAULT_LEVEL)
    if response_log.level_problem(log_level):
        bad(response_log.SETTING, str(response_log.level_problem(log_level)), "WARNING is the default.")
    headers = app_setting("SEMAPHORE_RATELIMIT_HEADERS")
    if not isinstance(headers, bool):
        messages.append(
            _error(13, f"SEMAPHORE_RATELIMIT_HEADERS must be True or False, not {headers!r}.", "It is off by default.")
        )
    async_connection = app_setting("SEMAPHORE_ASYNC_CONNECTION")
    if async_connection is not None and not _importable(async_connection):
        messages.append(
            _error(
                14,
                f"SEMAPHORE_ASYNC_CONNECTION {async_connection!r} is neither a callable nor the dotted path of one.",
                "Give a function returning a redis.asyncio client (or its dotted path), or leave it None to "
                "derive the asyncio client from SEMAPHORE_CONNECTION.",
            )
        )
    return messages


@register(APP)
def check_partition_idle(app_configs: Any = None, **kwargs: Any) -> list[CheckMessage]:
    # It becomes a PEXPIRE in ms inside the scripts: a garbage value would
    # surface as a Redis error on the first keyed request, or never expire.
    value = app_setting("SEMAPHORE_PARTITION_IDLE")
    if (
        isinstance(value, (int, float))
        and not isinstance(value, bool)
        and math.isfinite(value)
        and 0.001 <= value <= MAX_SECONDS
    ):
        return []
    return [
        _error(
            11,
            f"SEMAPHORE_PARTITION_IDLE must be a positive number of seconds (1 ms to ten years), not {value!r}.",
            "It is how long an idle partition of a keyed semaphore keeps its keys; the default, 86400 "
            "(a day), suits most sites. See the docs, failure-modes.md (Memory).",
        )
    ]


def url_names(resolver: URLResolver | None = None, prefix: str = "") -> set[str]:
    """Every ``namespace:name`` the URLconf can reverse."""
    resolver = resolver or get_resolver()
    names = {prefix + key for key in resolver.reverse_dict if isinstance(key, str)}
    for namespace, (_pattern, sub) in resolver.namespace_dict.items():
        names |= url_names(sub, f"{prefix}{namespace}:")
    return names


@register(APP, Tags.urls)
def check_middleware_rules(app_configs: Any = None, **kwargs: Any) -> list[CheckMessage]:
    raw_rules = app_setting("SEMAPHORE_MIDDLEWARE_RULES") or []
    if not isinstance(raw_rules, (list, tuple)):
        return [_error(9, "SEMAPHORE_MIDDLEWARE_RULES must be a list of dicts.", "See the docs, guides/middleware.md.")]
    messages: list[CheckMessage] = []
    known_urls: set[str] | None = None
    for index, raw in enumerate(raw_rules):
        problems = rule_problems(index, raw)
        messages += [_error(9, problem, f"Each rule's mode is one of {MODES}.") for problem in problems]
        messages += [_error(18, problem, _UNKNOWN_HINT) for problem in unknown_rule_fields(index, raw)]
        if not isinstance(raw, Mapping):
            continue
        name = raw.get("semaphore")
        if isinstance(name, str) and name not in declared():
            messages.append(
                _error(
                    7,
                    f"SEMAPHORE_MIDDLEWARE_RULES[{index}] names the semaphore {name!r}, which SEMAPHORES lacks.",
                    f"Declare it in SEMAPHORES or fix the name; declared: {', '.join(declared()) or 'none'}.",
                )
            )
        problem = key_problem(raw.get("key"))
        if problem:
            messages.append(_error(6, f"SEMAPHORE_MIDDLEWARE_RULES[{index}]['key']: {problem}", _KEY_HINT))
        messages += _too_heavy(f"SEMAPHORE_MIDDLEWARE_RULES[{index}]", name, raw.get("weight"))
        wanted = as_strings(raw.get("url_name"))
        if wanted and _has_urlconf():
            known_urls = url_names() if known_urls is None else known_urls
            messages += [
                _error(
                    8,
                    f"SEMAPHORE_MIDDLEWARE_RULES[{index}] names the URL {url!r}, which the URLconf does not have.",
                    "Use the name given to path(..., name=...), with its namespace ('app:name').",
                )
                for url in wanted
                if url not in known_urls
            ]
    return messages


def _too_heavy(where: str, name: object, weight: object) -> list[CheckMessage]:
    """E012 when ``weight`` is above the declared limit of ``name`` (other mistakes are checked elsewhere)."""
    options = declared().get(name) if isinstance(name, str) else None
    limit = options.get("limit") if isinstance(options, Mapping) else None
    if is_adaptive(limit):
        # An adaptive limit may come down to its min: a heavier request would then be turned away.
        limit = limit.get("adaptive", {}).get("min") if isinstance(limit.get("adaptive"), Mapping) else None
    if not (isinstance(weight, int) and isinstance(limit, int)) or weight <= limit:
        return []
    return [
        _error(
            12,
            f"{where} takes weight {weight} of semaphore {name!r}, whose limit is {limit}: every such request "
            "would be turned away.",
            "Lower the weight, or raise the semaphore's limit.",
        )
    ]


def _has_urlconf() -> bool:
    """Settings without URLs (a Celery worker's: it runs the checks as it starts) have no views to check."""
    return bool(getattr(settings, "ROOT_URLCONF", None))


def routed_views(resolver: URLResolver | None = None) -> Iterator[Callable[..., Any]]:
    """Every view the URLconf routes to, and the handlers of class-based ones."""
    if resolver is None and not _has_urlconf():
        return
    for entry in (resolver or get_resolver()).url_patterns:
        if isinstance(entry, URLResolver):
            yield from routed_views(entry)
        elif isinstance(entry, URLPattern):
            yield entry.callback
            view_class = getattr(entry.callback, "view_class", None)
            for method in ("dispatch", *getattr(view_class, "http_method_names", ())):
                handler = getattr(view_class, method, None)
                if handler is not None:
                    yield handler


@register(APP, Tags.urls)
def check_decorated_views(app_configs: Any = None, **kwargs: Any) -> list[CheckMessage]:
    # @semaphore records (name, weight) on the view it wraps; only views the
    # URLconf imports can be seen here.
    messages: list[CheckMessage] = []
    seen: set[tuple[str, str, int]] = set()
    for view in routed_views():
        where = f"@semaphore on {getattr(view, '__module__', '?')}.{getattr(view, '__qualname__', view)}"
        for name, weight in getattr(view, "semaphore_guards", ()):
            if (where, name, weight) not in seen:
                seen.add((where, name, weight))
                messages += _too_heavy(where, name, weight)
    return messages


@register(APP)
def check_middleware_installed(app_configs: Any = None, **kwargs: Any) -> list[CheckMessage]:
    middleware = list(getattr(settings, "MIDDLEWARE", None) or [])
    if app_setting("SEMAPHORE_MIDDLEWARE_RULES") and not uses_middleware():
        return [
            _warning(
                2,
                "SEMAPHORE_MIDDLEWARE_RULES is set but SemaphoreMiddleware is not in MIDDLEWARE: no rule applies.",
                f"Add {MIDDLEWARE_PATH!r} to MIDDLEWARE, after {AUTH_MIDDLEWARE_PATH!r}.",
            )
        ]
    if _before(middleware, MIDDLEWARE_PATH, AUTH_MIDDLEWARE_PATH):
        return [
            _warning(
                3,
                "SemaphoreMiddleware runs before AuthenticationMiddleware: user keys and the bypass predicate "
                "see no user.",
                f"Move {MIDDLEWARE_PATH!r} after {AUTH_MIDDLEWARE_PATH!r}.",
            )
        ]
    return []


def _before(middleware: Iterable[str], first: str, second: str) -> bool:
    order = list(middleware)
    return first in order and second in order and order.index(first) < order.index(second)


@register(APP)
def check_client_chosen_keys(app_configs: Any = None, **kwargs: Any) -> list[CheckMessage]:
    raw = getattr(settings, "SEMAPHORES", None) or {}
    if not isinstance(raw, Mapping):
        return []  # E005 says so
    keyed = [
        (f"SEMAPHORES[{name!r}]", name, options.get("key"))
        for name, options in raw.items()
        if isinstance(options, Mapping)
    ]
    rules = app_setting("SEMAPHORE_MIDDLEWARE_RULES") or []
    if isinstance(rules, (list, tuple)):
        keyed += [
            (f"SEMAPHORE_MIDDLEWARE_RULES[{index}]", rule.get("semaphore"), rule.get("key"))
            for index, rule in enumerate(rules)
            if isinstance(rule, Mapping)
        ]
    messages: list[CheckMessage] = []
    for where, name, key in keyed:
        options = raw.get(name) if isinstance(name, str) else None
        if client_chosen(key) and isinstance(options, Mapping) and options.get("max_partitions") is None:
            messages.append(
                _warning(
                    4,
                    f"{where} keys semaphore {name!r} by {key!r}, whose value the client chooses, and "
                    f"SEMAPHORES[{name!r}] sets no 'max_partitions': every new value makes a new partition "
                    "in Redis, kept until SEMAPHORE_PARTITION_IDLE after its last use.",
                    "Set 'max_partitions' (idle partitions past it are evicted, oldest first), key by something "
                    "you have verified, and see the docs, guides/keys-and-proxies.md.",
                )
            )
    return messages


@register(APP)
def check_staticfiles(app_configs: Any = None, **kwargs: Any) -> list[CheckMessage]:
    # Without the admin there is no dashboard, and the app serves no static file.
    installed = getattr(settings, "INSTALLED_APPS", ())
    if "django.contrib.admin" not in installed or "django.contrib.staticfiles" in installed:
        return []
    return [
        _warning(
            5,
            "django.contrib.staticfiles is not in INSTALLED_APPS: the semaphore dashboard's CSS and JS are never "
            "collected, so they answer 404 unless your web server serves each app's static/ directory.",
            "Add 'django.contrib.staticfiles' to INSTALLED_APPS, set STATIC_ROOT and run "
            "'manage.py collectstatic' (or serve them with WhiteNoise).",
        )
    ]
