"""The request path's system checks: keys, middleware rules, decorated views and the web's settings.

Registered by ``django_semaphore/checks.py`` beside the engine's
(``core/checks.py``, whose helpers these use); the reference lists every ID
(docs/reference/checks.md).

Errors:

- E005 a ``SEMAPHORES`` entry's ``view`` does not import.
- E006 a key (in ``SEMAPHORES`` or a rule) is of no known kind.
- E007 a middleware rule names a semaphore ``SEMAPHORES`` does not declare.
- E008 a middleware rule names a URL the URLconf does not have.
- E009 a middleware rule is malformed (field, mode, regex, wait, weight).
- E010 a request path's ``SEMAPHORE_*`` setting has a wrong value.
- E012 a middleware rule's or a routed view's ``@semaphore`` weight is above the
  semaphore's declared limit (every such request would be turned away).
- E013 ``SEMAPHORE_RATELIMIT_HEADERS`` is not a bool.
- E018 a middleware rule has a key no rule field reads (a misspelling).

Warnings:

- W002 middleware rules are set but ``SemaphoreMiddleware`` is not in ``MIDDLEWARE``.
- W003 ``SemaphoreMiddleware`` runs before ``AuthenticationMiddleware``, so user keys
  and the bypass predicate see no user.
- W004 a semaphore is keyed by a value the client chooses (``header:``, ``get:``, an
  address from a forwarded header; in ``SEMAPHORES`` or a middleware rule) and sets
  no ``max_partitions``: every new value makes a new partition in Redis.
- W009 ``@semaphore`` or a middleware rule keys by ``"user"`` or ``"user_or_ip"`` a view
  whose users authenticate inside it (REST framework's authenticators, Django Ninja's
  auth, but sessions): the guard runs before that and sees them as anonymous.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from django.conf import settings
from django.core.checks import CheckMessage
from django.core.exceptions import ImproperlyConfigured
from django.urls import URLPattern, URLResolver, get_resolver
from django.urls.resolvers import RoutePattern

from ..core.adaptive import is_adaptive
from ..core.checks import UNKNOWN_HINT, error, importable, seconds, warning
from ..core.conf import declared
from . import response_log
from .admission import MODES
from .conf import web_setting
from .partition_keys import client_chosen, key_problem
from .rules import Rule, active_rules, as_strings, rule_problems, unknown_rule_fields, uses_middleware

MIDDLEWARE_PATH = "django_semaphore.middleware.SemaphoreMiddleware"
AUTH_MIDDLEWARE_PATH = "django.contrib.auth.middleware.AuthenticationMiddleware"
KEY_HINT = "Use 'ip', 'user', 'user_or_ip', 'header:<name>', 'get:<param>', a callable or its dotted path."


def check_semaphore_keys(app_configs: Any = None, **kwargs: Any) -> list[CheckMessage]:
    """E006 and E005 for what a ``SEMAPHORES`` entry tells the request path: its key and its 503 view."""
    raw = getattr(settings, "SEMAPHORES", None) or {}
    if not isinstance(raw, Mapping):
        return []  # E005 (core/checks.py) says so
    messages: list[CheckMessage] = []
    for name, options in raw.items():
        if not isinstance(options, Mapping):
            continue
        problem = key_problem(options.get("key")) if isinstance(options.get("key"), str) else None
        if problem:
            messages.append(error(6, f"SEMAPHORES[{name!r}]['key']: {problem}", KEY_HINT))
        view = options.get("view")
        if view is not None and not importable(view):
            messages.append(
                error(5, f"SEMAPHORES[{name!r}]['view'] {view!r} does not import a view.", "Fix the dotted path.")
            )
    return messages


def check_web_settings(app_configs: Any = None, **kwargs: Any) -> list[CheckMessage]:
    """E010 and E013 for the request path's own ``SEMAPHORE_*`` settings (web/conf.py)."""
    messages: list[CheckMessage] = []

    def bad(setting: str, msg: str, hint: str) -> None:
        messages.append(error(10, f"{setting}: {msg}", hint))

    for setting in ("SEMAPHORE_WEB_LEASE", "SEMAPHORE_WEB_MAX_HOLD"):
        value = web_setting(setting)
        if setting == "SEMAPHORE_WEB_MAX_HOLD" and value is None:
            continue  # no bound on how long a request holds its permits
        if not seconds(value):
            bad(setting, "must be a number of seconds > 0.", "The default is fine for most sites.")
    for setting in ("SEMAPHORE_VIEW", "SEMAPHORE_MIDDLEWARE_BYPASS"):
        value = web_setting(setting)
        if value is not None and not importable(value):
            bad(setting, f"{value!r} does not import a callable.", "Give the dotted path of a function.")
    meta_key = web_setting("SEMAPHORE_IP_META_KEY")
    if not (callable(meta_key) or (isinstance(meta_key, str) and ("." not in meta_key or importable(meta_key)))):
        bad(
            "SEMAPHORE_IP_META_KEY",
            f"{meta_key!r} is neither a request.META key nor an importable callable.",
            "Use 'REMOTE_ADDR', 'HTTP_X_FORWARDED_FOR' (behind your own proxy), or a function's dotted path.",
        )
    for setting, low in (("SEMAPHORE_TRUSTED_PROXIES", 1), ("SEMAPHORE_IPV6_PREFIX", 1)):
        value = web_setting(setting)
        if not isinstance(value, int) or isinstance(value, bool) or value < low:
            bad(setting, f"must be an integer >= {low}.", "See the docs, guides/keys-and-proxies.md.")
    prefix = web_setting("SEMAPHORE_IPV6_PREFIX")
    if isinstance(prefix, int) and prefix > 128:
        bad("SEMAPHORE_IPV6_PREFIX", "must be at most 128.", "64 groups a client's whole /64.")
    exempt = web_setting("SEMAPHORE_MIDDLEWARE_EXEMPT_PATHS")
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
    scopes = web_setting("SEMAPHORE_THROTTLE_SCOPES")
    if not isinstance(scopes, Mapping):
        bad(
            "SEMAPHORE_THROTTLE_SCOPES",
            "must be a dict of throttle_scope -> semaphore name.",
            "See guides/rest-framework.md.",
        )
    else:
        for scope, name in scopes.items():
            if name not in declared():
                bad(
                    "SEMAPHORE_THROTTLE_SCOPES", f"{scope!r} maps to {name!r}, which SEMAPHORES lacks.", "Fix the name."
                )
    headers = web_setting("SEMAPHORE_RATELIMIT_HEADERS")
    if not isinstance(headers, bool):
        messages.append(
            error(13, f"SEMAPHORE_RATELIMIT_HEADERS must be True or False, not {headers!r}.", "It is off by default.")
        )
    return messages


def url_names(resolver: URLResolver | None = None, prefix: str = "") -> set[str]:
    """Every ``namespace:name`` the URLconf can reverse."""
    resolver = resolver or get_resolver()
    names = {prefix + key for key in resolver.reverse_dict if isinstance(key, str)}
    for namespace, (_pattern, sub) in resolver.namespace_dict.items():
        names |= url_names(sub, f"{prefix}{namespace}:")
    return names


def check_middleware_rules(app_configs: Any = None, **kwargs: Any) -> list[CheckMessage]:
    raw_rules = web_setting("SEMAPHORE_MIDDLEWARE_RULES") or []
    if not isinstance(raw_rules, (list, tuple)):
        return [error(9, "SEMAPHORE_MIDDLEWARE_RULES must be a list of dicts.", "See the docs, guides/middleware.md.")]
    messages: list[CheckMessage] = []
    known_urls: set[str] | None = None
    for index, raw in enumerate(raw_rules):
        problems = rule_problems(index, raw)
        messages += [error(9, problem, f"Each rule's mode is one of {MODES}.") for problem in problems]
        messages += [error(18, problem, UNKNOWN_HINT) for problem in unknown_rule_fields(index, raw)]
        if not isinstance(raw, Mapping):
            continue
        name = raw.get("semaphore")
        if isinstance(name, str) and name not in declared():
            messages.append(
                error(
                    7,
                    f"SEMAPHORE_MIDDLEWARE_RULES[{index}] names the semaphore {name!r}, which SEMAPHORES lacks.",
                    f"Declare it in SEMAPHORES or fix the name; declared: {', '.join(declared()) or 'none'}.",
                )
            )
        problem = key_problem(raw.get("key"))
        if problem:
            messages.append(error(6, f"SEMAPHORE_MIDDLEWARE_RULES[{index}]['key']: {problem}", KEY_HINT))
        messages += _too_heavy(f"SEMAPHORE_MIDDLEWARE_RULES[{index}]", name, raw.get("weight"))
        wanted = as_strings(raw.get("url_name"))
        if wanted and _has_urlconf():
            known_urls = url_names() if known_urls is None else known_urls
            messages += [
                error(
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
    if isinstance(limit, Mapping) and is_adaptive(limit):
        # An adaptive limit may come down to its min: a heavier request would then be turned away.
        rule = limit.get("adaptive")
        limit = rule.get("min") if isinstance(rule, Mapping) else None
    if not (isinstance(weight, int) and isinstance(limit, int)) or weight <= limit:
        return []
    return [
        error(
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


def check_decorated_views(app_configs: Any = None, **kwargs: Any) -> list[CheckMessage]:
    # @semaphore records (name, weight) on the view it wraps; only views the
    # URLconf imports can be seen here.
    messages: list[CheckMessage] = []
    seen: set[tuple[str, str, int]] = set()
    for view in routed_views():
        where = f"@semaphore on {getattr(view, '__module__', '?')}.{getattr(view, '__qualname__', view)}"
        for name, weight, _key in getattr(view, "semaphore_guards", ()):
            if (where, name, weight) not in seen:
                seen.add((where, name, weight))
                messages += _too_heavy(where, name, weight)
    return messages


def check_middleware_installed(app_configs: Any = None, **kwargs: Any) -> list[CheckMessage]:
    middleware = list(getattr(settings, "MIDDLEWARE", None) or [])
    if web_setting("SEMAPHORE_MIDDLEWARE_RULES") and not uses_middleware():
        return [
            warning(
                2,
                "SEMAPHORE_MIDDLEWARE_RULES is set but SemaphoreMiddleware is not in MIDDLEWARE: no rule applies.",
                f"Add {MIDDLEWARE_PATH!r} to MIDDLEWARE, after {AUTH_MIDDLEWARE_PATH!r}.",
            )
        ]
    if _before(middleware, MIDDLEWARE_PATH, AUTH_MIDDLEWARE_PATH):
        return [
            warning(
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


def check_client_chosen_keys(app_configs: Any = None, **kwargs: Any) -> list[CheckMessage]:
    raw = getattr(settings, "SEMAPHORES", None) or {}
    if not isinstance(raw, Mapping):
        return []  # E005 says so
    keyed = [
        (f"SEMAPHORES[{name!r}]", name, options.get("key"))
        for name, options in raw.items()
        if isinstance(options, Mapping)
    ]
    rules = web_setting("SEMAPHORE_MIDDLEWARE_RULES") or []
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
                warning(
                    4,
                    f"{where} keys semaphore {name!r} by {key!r}, whose value the client chooses, and "
                    f"SEMAPHORES[{name!r}] sets no 'max_partitions': every new value makes a new partition "
                    "in Redis, kept until SEMAPHORE_PARTITION_IDLE after its last use.",
                    "Set 'max_partitions' (idle partitions past it are evicted, oldest first), key by something "
                    "you have verified, and see the docs, guides/keys-and-proxies.md.",
                )
            )
    return messages


# -- W009: user keys ahead of the view's own authentication ---------------------------------------------

USER_KINDS = ("user", "user_or_ip")


@dataclass(frozen=True)
class Route:
    """One routed view: its URL name (with namespaces), a path it serves (``path_info``), its callback."""

    name: str | None
    sample: str
    callback: Callable[..., Any]


def _sample(pattern: Any) -> str:
    """A path the pattern matches: converters and groups stand as "1" (``<int:pk>``, ``(?P<pk>[^/.]+)``)."""
    text = str(pattern)
    if isinstance(pattern, RoutePattern):  # a path() route
        return re.sub(r"<(?:\w+:)?\w+>", "1", text)
    text = text.removeprefix("^").removesuffix("$").removesuffix("\\Z")
    out, depth = [], 0
    for char in text:
        if char == "(":
            depth += 1
            if depth == 1:
                out.append("1")
        elif char == ")":
            depth -= 1
        elif depth == 0 and char not in "?\\":
            out.append(char)
    return "".join(out)


def routes(resolver: URLResolver | None = None, prefix: str = "/", namespace: str = "") -> Iterator[Route]:
    """Every routed view, with a path it serves."""
    if resolver is None and not _has_urlconf():
        return
    for entry in (resolver or get_resolver()).url_patterns:
        sample = prefix + _sample(entry.pattern)
        if isinstance(entry, URLResolver):
            yield from routes(entry, sample, f"{namespace}{entry.namespace}:" if entry.namespace else namespace)
        elif isinstance(entry, URLPattern):
            yield Route(f"{namespace}{entry.name}" if entry.name else None, sample, entry.callback)


@dataclass(frozen=True)
class Inside:
    """A view that authenticates inside itself: what it is called, what it uses, the guard that runs after that."""

    view: str
    how: str
    instead: str
    guarded: tuple[
        tuple[str, Callable[..., Any]], ...
    ]  # where its @semaphore may sit, named: handlers, view, operations


def _qualified(thing: Any) -> str:
    """Its dotted name; by ``__name__`` when that was renamed (REST framework's ``@api_view`` class bears the
    function's name, its ``__qualname__`` is still ``WrappedAPIView``)."""
    name = str(getattr(thing, "__qualname__", thing))
    renamed = getattr(thing, "__name__", None)
    if isinstance(renamed, str) and name.rsplit(".", 1)[-1] != renamed:
        name = renamed
    return f"{getattr(thing, '__module__', '?')}.{name}"


def _not_sessions(classes: Iterable[Any], session_name: str) -> list[str]:
    """The names of the authenticators that are not session-based (those see the user Django's middleware sees)."""
    names = []
    for item in classes:
        kind = item if isinstance(item, type) else type(item)
        if not any(base.__name__.startswith(session_name) for base in kind.__mro__):
            names.append(kind.__name__)
    return names


def _inside(callback: Callable[..., Any]) -> Inside | None:
    """REST framework's views (``callback.cls``) and Django Ninja's operations (a ``PathView`` in the callback's
    closure) whose authentication is not Django's session: recognised by their shape, without importing either."""
    view_class = getattr(callback, "cls", None)
    if isinstance(getattr(view_class, "authentication_classes", None), (list, tuple)):
        others = _not_sessions(view_class.authentication_classes, "SessionAuthentication")  # type: ignore[union-attr]
        if not others:
            return None
        label = _qualified(view_class)
        # Only dispatch (and the view around it) runs before the authenticators: the handlers (get, post, a
        # viewset's actions) run inside dispatch, after them, with REST framework's request and its user.
        dispatch = getattr(view_class, "dispatch", None)
        return Inside(
            label,
            f"REST framework's {', '.join(others)}",
            "django_semaphore.rest_framework.SemaphoreThrottle in its throttle_classes",
            # dispatch first: as_view() copies what decorators marked on dispatch onto the view.
            (*(((f"{label}.dispatch", dispatch),) if dispatch is not None else ()), (label, callback)),
        )
    for cell in getattr(callback, "__closure__", None) or ():
        operations = getattr(cell.cell_contents, "operations", None)
        if not isinstance(operations, list):
            continue
        authenticated = [op for op in operations if _not_sessions(getattr(op, "auth_callbacks", ()), "SessionAuth")]
        if authenticated:
            functions = tuple(op.view_func for op in authenticated)
            auths = {name for op in authenticated for name in _not_sessions(op.auth_callbacks, "SessionAuth")}
            return Inside(
                ", ".join(_qualified(function) for function in functions),
                f"Django Ninja's {', '.join(sorted(auths))}",
                "django_semaphore.ninja.semaphore(...) under its @api decorator",
                # The function, and the run around it (add_decorator(..., mode="view") wraps that, before the auth).
                tuple((_qualified(op.view_func), target) for op in authenticated for target in (op.view_func, op.run)),
            )
    return None


def _user_kind(name: object, key: object) -> str | None:
    """The user kind of key this guard partitions by (its own, else its semaphore's), or None."""
    if key is None and isinstance(name, str):
        options = declared().get(name)
        key = options.get("key") if isinstance(options, Mapping) else None
    return key if isinstance(key, str) and key in USER_KINDS else None


def _rule_matches(rule: Rule, route: Route) -> bool:
    """Whether the rule may match the route's requests (its path regexes tried on the route's sample path)."""
    if not (rule.url_names or rule.paths or rule.view_attributes):
        return True
    if route.name in rule.url_names or any(re.match(pattern, route.sample) for pattern in rule.paths):
        return True
    view_class = getattr(route.callback, "view_class", None)
    return any(getattr(route.callback, a, False) or getattr(view_class, a, False) for a in rule.view_attributes)


def _silent_pass(where: str, name: object, kind: str, inside: Inside, runs: str) -> CheckMessage:
    limits = "does not limit" if kind == "user" else "limits by their address, not per user"
    return warning(
        9,
        f"{where} keys semaphore {name!r} by {kind!r}, but {inside.view} authenticates its users inside the view "
        f"({inside.how}): {runs} runs before that, sees them as anonymous, and {kind!r} {limits} anonymous requests.",
        f"Guard it with {inside.instead}: it runs after the view's authentication and keys by the user the view sees. "
        "See the docs, guides/keys-and-proxies.md (user keys and views that authenticate themselves).",
    )


def check_user_keys_before_authentication(app_configs: Any = None, **kwargs: Any) -> list[CheckMessage]:
    """W009: ``"user"`` and ``"user_or_ip"`` ahead of a view's own authentication, which must not pass in silence."""
    rules = [(i, rule) for i, rule in _active_rules_or_none() if rule.mode != "off"] if uses_middleware() else []
    messages: dict[tuple[str, str], CheckMessage] = {}
    for route in routes():
        inside = _inside(route.callback)
        if inside is None:
            continue
        for label, target in inside.guarded:
            for name, _weight, key in getattr(target, "semaphore_guards", ()):
                kind = _user_kind(name, key)
                where = f"@semaphore on {label}"
                if kind and (f"@semaphore({name!r})", inside.view) not in messages:
                    messages[(f"@semaphore({name!r})", inside.view)] = _silent_pass(
                        where, name, kind, inside, "the decorator"
                    )
        for index, rule in rules:
            kind = _user_kind(rule.semaphore, rule.key)
            where = f"SEMAPHORE_MIDDLEWARE_RULES[{index}] (it matches {route.sample})"
            if kind and _rule_matches(rule, route) and (f"rule {index}", inside.view) not in messages:
                messages[(f"rule {index}", inside.view)] = _silent_pass(
                    where, rule.semaphore, kind, inside, "the middleware"
                )
    return list(messages.values())


def _active_rules_or_none() -> list[tuple[int, Rule]]:
    """The middleware's rules with their index; none when they are malformed (E009 says so)."""
    try:
        return list(enumerate(active_rules()))
    except ImproperlyConfigured:
        return []
