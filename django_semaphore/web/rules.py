"""The middleware's rules: which requests take which semaphores.

``SEMAPHORE_MIDDLEWARE_RULES`` is a list of dicts::

    {"semaphore": "search",          # required: a name from SEMAPHORES
     "url_name": "search",           # match: URL name(s), "namespace:name" too
     "path": r"^/api/",              # match: regex(es) on request.path_info
     "view_attribute": "heavy",      # match: views with a truthy attribute
     "methods": ["POST"],            # only these HTTP methods (HEAD comes with GET)
     "key": "user_or_ip",            # partition (default: the semaphore's key)
     "wait": 0.5, "weight": 1,       # default: the semaphore's options
     "mode": "enforce"}              # or "dry-run" or "off"

A rule matches when any of its ``url_name`` / ``path`` / ``view_attribute``
entries does (a rule with none matches every request) and the method is
listed (when ``methods`` is given).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from functools import cache, cached_property
from typing import Any

from django.conf import settings
from django.core.exceptions import ImproperlyConfigured
from django.core.signals import setting_changed
from django.http import HttpRequest
from django.urls import Resolver404, ResolverMatch, resolve
from django.utils.module_loading import import_string

from ..core.options import unknown_problems, warn_unknown
from .admission import ENFORCE, MODES, OFF, Guarded
from .conf import web_setting

RULE_FIELDS = frozenset({"semaphore", "url_name", "path", "view_attribute", "methods", "key", "wait", "weight", "mode"})


def as_strings(value: Any) -> tuple[str, ...]:
    """One string or a list of them, as a tuple: a lone string is one item, never its characters."""
    if value is None:
        return ()
    return (value,) if isinstance(value, str) else tuple(value)


def guarded_methods(listed: Any) -> tuple[str, ...]:
    """The methods a rule's ``methods`` covers: HEAD wherever GET is, since Django answers HEAD with the GET view."""
    methods = tuple(method.upper() for method in as_strings(listed))
    return (*methods, "HEAD") if "GET" in methods and "HEAD" not in methods else methods


@dataclass(frozen=True)
class Rule:
    semaphore: str
    url_names: tuple[str, ...] = ()
    paths: tuple[str, ...] = ()
    view_attributes: tuple[str, ...] = ()
    methods: tuple[str, ...] = ()
    key: Any = None
    wait: float | None = None
    weight: int | None = None
    mode: str = ENFORCE

    @cached_property
    def guarded(self) -> Guarded:
        """What this rule asks of a request it matches (web/admission.py)."""
        return Guarded(self.semaphore, self.key, self.wait, self.weight, self.mode)

    @classmethod
    def parse(cls, raw: Mapping[str, Any]) -> Rule:
        return cls(
            semaphore=raw["semaphore"],
            url_names=as_strings(raw.get("url_name")),
            paths=as_strings(raw.get("path")),
            view_attributes=as_strings(raw.get("view_attribute")),
            methods=guarded_methods(raw.get("methods")),
            key=raw.get("key"),
            wait=raw.get("wait"),
            weight=raw.get("weight"),
            mode=raw.get("mode", ENFORCE),
        )

    @property
    def needs_view(self) -> bool:
        return bool(self.url_names or self.view_attributes)

    def matches(self, request: HttpRequest, view: RequestView) -> bool:
        if self.mode == OFF or (self.methods and request.method not in self.methods):
            return False
        if not (self.url_names or self.paths or self.view_attributes):
            return True
        if any(re.match(pattern, request.path_info) for pattern in self.paths):
            return True
        match = view.match
        if match is None:
            return False
        if match.view_name in self.url_names:
            return True
        return any(view.has_attribute(attribute) for attribute in self.view_attributes)


class RequestView:
    """The request's URL match, resolved at most once and only if a rule needs it."""

    def __init__(self, request: HttpRequest) -> None:
        self.request = request

    @cached_property
    def match(self) -> ResolverMatch | None:
        existing: ResolverMatch | None = getattr(self.request, "resolver_match", None)
        if existing is not None:
            return existing
        try:
            return resolve(self.request.path_info, getattr(self.request, "urlconf", None))
        except Resolver404:
            return None

    def has_attribute(self, attribute: str) -> bool:
        func = self.match.func if self.match else None
        return bool(getattr(func, attribute, False) or getattr(getattr(func, "view_class", None), attribute, False))


def rule_problems(index: int, raw: object) -> list[str]:
    """Everything wrong with one rule's own fields (names and URLs are checked elsewhere)."""
    where = f"SEMAPHORE_MIDDLEWARE_RULES[{index}]"
    if not isinstance(raw, Mapping):
        return [f"{where} must be a dict."]
    problems = []  # unknown fields are E018's (unknown_rule_fields), and ignored at run time
    if not isinstance(raw.get("semaphore"), str):
        problems.append(f"{where} needs 'semaphore': the name of a semaphore.")
    if raw.get("mode", ENFORCE) not in MODES:
        problems.append(f"{where}['mode'] must be one of {MODES}.")
    for pattern in as_strings(raw.get("path")):
        try:
            re.compile(pattern)
        except (re.error, TypeError) as exc:
            problems.append(f"{where}['path'] {pattern!r} is not a regular expression: {exc}.")
    wait = raw.get("wait")
    if wait is not None and (not isinstance(wait, (int, float)) or isinstance(wait, bool) or wait < 0):
        problems.append(f"{where}['wait'] must be a number of seconds >= 0.")
    weight = raw.get("weight")
    if weight is not None and (not isinstance(weight, int) or isinstance(weight, bool) or weight < 1):
        problems.append(f"{where}['weight'] must be an integer >= 1.")
    return problems


def unknown_rule_fields(index: int, raw: object) -> list[str]:
    """E018: fields of one rule that no part of the middleware reads (a misspelling, or a newer release's)."""
    if not isinstance(raw, Mapping):
        return []
    return unknown_problems(f"SEMAPHORE_MIDDLEWARE_RULES[{index}]", raw, RULE_FIELDS)


# The middleware's settings are read on every request, so each is checked and parsed once and
# kept until a setting changes (override_settings in tests, or the settings fixture). A malformed
# value is not kept: every request refuses it again, as `manage.py check` does.


@cache
def active_rules() -> tuple[Rule, ...]:
    """The rules in settings; refuses to run malformed ones (``manage.py check`` names them)."""
    raw_rules = web_setting("SEMAPHORE_MIDDLEWARE_RULES") or []
    problems = [problem for index, raw in enumerate(raw_rules) for problem in rule_problems(index, raw)]
    if problems:
        raise ImproperlyConfigured(" ".join(problems))
    for index, raw in enumerate(raw_rules):
        warn_unknown(f"SEMAPHORE_MIDDLEWARE_RULES[{index}]", raw, RULE_FIELDS)
    return tuple(Rule.parse(raw) for raw in raw_rules)


@cache
def _exempt_patterns() -> tuple[re.Pattern[str], ...]:
    return tuple(re.compile(pattern) for pattern in as_strings(web_setting("SEMAPHORE_MIDDLEWARE_EXEMPT_PATHS")))


def exempt_path(request: HttpRequest) -> bool:
    """Paths no rule applies to (health checks, static files): regexes on ``path_info``."""
    return any(pattern.match(request.path_info) for pattern in _exempt_patterns())


@cache
def bypass_predicate() -> Callable[[HttpRequest], bool]:
    setting = web_setting("SEMAPHORE_MIDDLEWARE_BYPASS")
    if setting is None:
        return _never
    predicate: Callable[[HttpRequest], bool] = import_string(setting) if isinstance(setting, str) else setting
    return predicate


def _forget_parsed(**kwargs: Any) -> None:
    for parsed in (active_rules, _exempt_patterns, bypass_predicate):
        parsed.cache_clear()


setting_changed.connect(_forget_parsed, dispatch_uid="django_semaphore.rules")


def _never(request: HttpRequest) -> bool:
    return False


def uses_middleware() -> bool:
    return "django_semaphore.middleware.SemaphoreMiddleware" in (getattr(settings, "MIDDLEWARE", None) or [])
