"""Turn a request into a partition key: whose share of a semaphore it uses.

A key spec is one of ``"ip"``, ``"user"``, ``"user_or_ip"``,
``"header:<name>"``, ``"get:<param>"``, a callable ``(request) -> str | None``
or the dotted path of one. ``None`` as the value means "not limited by this
semaphore": an anonymous user under ``"user"``, a missing header or query
parameter, or whatever a callable decides. The value is hashed by the core
before it reaches Redis, so it may be any text.
"""

from __future__ import annotations

import inspect
import ipaddress
from collections.abc import Callable
from typing import Any

from asgiref.sync import iscoroutinefunction, sync_to_async
from django.core.exceptions import ImproperlyConfigured
from django.http import HttpRequest
from django.utils.module_loading import import_string

from .conf import app_setting

KeyFunction = Callable[[HttpRequest], Any]
SIMPLE_KINDS = ("ip", "user", "user_or_ip")
PREFIXED_KINDS = ("header:", "get:")


def key_problem(spec: object) -> str | None:
    """Why ``spec`` is not a usable key spec, or None if it is; for the system checks."""
    if spec is None or callable(spec) or spec in SIMPLE_KINDS:
        return None
    if not isinstance(spec, str):
        return f"A key must be a string or a callable, not {type(spec).__name__}."
    for prefix in PREFIXED_KINDS:
        if spec.startswith(prefix):
            return None if spec[len(prefix) :] else f"Key {spec!r} names no {prefix[:-1]}."
    if "." in spec:
        try:
            function = import_string(spec)
        except ImportError as exc:
            return f"Key {spec!r} is not a known kind and cannot be imported: {exc}."
        return None if callable(function) else f"Key {spec!r} imports something that is not callable."
    return f"Unknown key kind {spec!r}; use one of {', '.join(SIMPLE_KINDS)}, header:<name>, get:<param>."


def client_ip(request: HttpRequest) -> str | None:
    """The client's address, from ``SEMAPHORE_IP_META_KEY``.

    Behind proxies that append to ``X-Forwarded-For``, only the entries your
    own proxies added can be trusted: the address is taken
    ``SEMAPHORE_TRUSTED_PROXIES`` entries from the right. IPv6 addresses are
    grouped by ``SEMAPHORE_IPV6_PREFIX`` (a /64 by default), since one client
    usually owns a whole /64 and could otherwise hop between addresses.
    """
    source = app_setting("SEMAPHORE_IP_META_KEY")
    if callable(source) or (isinstance(source, str) and "." in source):
        function = source if callable(source) else import_string(source)
        raw = function(request)
    else:
        raw = request.META.get(source)
    if not raw:
        return None
    entries = [entry.strip() for entry in str(raw).split(",") if entry.strip()]
    if not entries:
        return None
    depth = max(int(app_setting("SEMAPHORE_TRUSTED_PROXIES")), 1)
    address = entries[-min(depth, len(entries))]
    try:
        parsed = ipaddress.ip_address(address)
    except ValueError:
        return address  # not an address (a unix socket, a test client): still a usable key
    if parsed.version == 6:
        prefix = int(app_setting("SEMAPHORE_IPV6_PREFIX"))
        return str(ipaddress.ip_network(f"{parsed}/{prefix}", strict=False))
    return str(parsed)


def _user_key(user: Any) -> str | None:
    if user is None or not user.is_authenticated:
        return None
    return f"user:{user.pk}"


def _ip_key(request: HttpRequest) -> str | None:
    ip = client_ip(request)
    return None if ip is None else f"ip:{ip}"


def _user(request: HttpRequest) -> str | None:
    return _user_key(getattr(request, "user", None))


def _user_or_ip(request: HttpRequest) -> str | None:
    return _user(request) or _ip_key(request)


async def _auser(request: HttpRequest) -> str | None:
    # request.user is lazy and may query the database: not allowed on the event loop.
    auser = getattr(request, "auser", None)
    return _user_key(await auser() if auser is not None else getattr(request, "user", None))


async def _auser_or_ip(request: HttpRequest) -> str | None:
    return await _auser(request) or _ip_key(request)


def resolve_key(spec: Any) -> KeyFunction | None:
    """The function computing a spec's key value (None for an unkeyed semaphore)."""
    if spec is None:
        return None
    if callable(spec):
        return spec
    if spec == "ip":
        return client_ip
    if spec == "user":
        return _user
    if spec == "user_or_ip":
        return _user_or_ip
    if isinstance(spec, str) and spec.startswith("header:"):
        header = spec[len("header:") :]
        return lambda request: request.headers.get(header) or None
    if isinstance(spec, str) and spec.startswith("get:"):
        param = spec[len("get:") :]
        return lambda request: request.GET.get(param) or None
    problem = key_problem(spec)
    if problem:
        raise ImproperlyConfigured(problem)
    return import_string(spec)


class NotLimited:
    """The key function returned None: this request is not limited by the semaphore."""


NOT_LIMITED = NotLimited()


def _value(value: Any) -> Any:
    return NOT_LIMITED if value is None or value == "" else value


def key_for(request: HttpRequest, spec: Any) -> Any:
    """The key value for ``request``: None for the whole semaphore, ``NOT_LIMITED`` to skip it."""
    function = resolve_key(spec)
    if function is None:
        return None
    value = function(request)
    if inspect.isawaitable(value):
        getattr(value, "close", lambda: None)()
        raise ImproperlyConfigured(f"Key function {spec!r} is async; it can only guard async views.")
    return _value(value)


async def akey_for(request: HttpRequest, spec: Any) -> Any:
    """``key_for`` inside an event loop: user lookups go through ``request.auser()``,
    async key functions are awaited and sync ones run in a thread (they may touch the database).
    """
    function = resolve_key(spec)
    if function is None:
        return None
    if function is _user:
        return _value(await _auser(request))
    if function is _user_or_ip:
        return _value(await _auser_or_ip(request))
    reads_headers_only = function is client_ip or (isinstance(spec, str) and spec.startswith(PREFIXED_KINDS))
    if reads_headers_only or iscoroutinefunction(function):
        value = function(request)
    else:
        value = sync_to_async(function)(request)
    return _value(await value if inspect.isawaitable(value) else value)
