"""Turn a request into a partition key: whose share of a semaphore it uses.

A key spec is one of ``"ip"``, ``"user"``, ``"user_or_ip"``,
``"header:<name>"``, ``"get:<param>"``, a callable ``(request) -> str | None``
or the dotted path of one. ``None`` as the value means "not limited by this
semaphore": an anonymous user under ``"user"``, a missing header or query
parameter, or whatever a callable decides. The value is hashed by the core
before it reaches Redis, so it may be any text.

Every value carries its kind as a prefix (``ip:``, ``user:``,
``header:<name>:``, ``get:<param>:``, ``custom:`` for a callable's), because
one semaphore may be keyed differently by different guards: without it,
``?tenant=user:42`` under ``"get:tenant"`` would be user 42's partition.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any
from urllib.parse import quote

from asgiref.sync import iscoroutinefunction, sync_to_async
from django.core.exceptions import ImproperlyConfigured
from django.http import HttpRequest
from django.utils.module_loading import import_string

from ..core.redis_keys import CUSTOM
from .addresses import client_network, parse_address
from .conf import web_setting

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


def client_chosen(spec: object) -> bool:
    """Whether the client picks the key's value freely, so that every new value makes a new partition.

    ``header:`` and ``get:`` values are whatever the client sends; an address
    read from a request header (``SEMAPHORE_IP_META_KEY = "HTTP_..."``) is
    too, as far as the client can reach Django or vary what its proxy adds.
    """
    if isinstance(spec, str) and spec.startswith(PREFIXED_KINDS):
        return True
    if spec in ("ip", "user_or_ip"):
        source = web_setting("SEMAPHORE_IP_META_KEY")
        return isinstance(source, str) and source.startswith("HTTP_")
    return False


def client_ip(request: HttpRequest) -> str | None:
    """The client's address, from ``SEMAPHORE_IP_META_KEY``.

    Behind proxies that append to ``X-Forwarded-For``, only the entries your
    own proxies added can be trusted: the address is taken
    ``SEMAPHORE_TRUSTED_PROXIES`` entries from the right. IPv6 addresses are
    grouped by ``SEMAPHORE_IPV6_PREFIX`` (a /64 by default), since one client
    usually owns a whole /64 and could otherwise hop between addresses;
    IPv4-mapped and NAT64 ones are the IPv4 client they carry (``addresses.py``).
    An entry that is no address is keyed as the connecting address: a client
    writing nonsense there must not get a fresh partition for each request.
    """
    source = web_setting("SEMAPHORE_IP_META_KEY")
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
    depth = max(int(web_setting("SEMAPHORE_TRUSTED_PROXIES")), 1)
    connecting = str(request.META.get("REMOTE_ADDR") or "")
    address = parse_address(entries[-min(depth, len(entries))]) or parse_address(connecting)
    if address is None:
        # Not an IP at all (a unix socket's name): the server wrote it, so it is the same for every request.
        return connecting or None
    return client_network(address, int(web_setting("SEMAPHORE_IPV6_PREFIX")))


def user_key(user: Any) -> str | None:
    """The partition value of ``user``, None for an anonymous one: the same under every face."""
    if user is None or not user.is_authenticated:
        return None
    return f"user:{user.pk}"


def ip_key(address: str | None) -> str | None:
    """The partition value of a client address (as ``client_ip`` reduces it), None without one."""
    return None if address is None else f"ip:{address}"


def _ip_key(request: HttpRequest) -> str | None:
    return ip_key(client_ip(request))


def _user(request: HttpRequest) -> str | None:
    return user_key(getattr(request, "user", None))


def _user_or_ip(request: HttpRequest) -> str | None:
    return _user(request) or _ip_key(request)


async def _auser(request: HttpRequest) -> str | None:
    # request.user is lazy and may query the database: not allowed on the event loop.
    auser = getattr(request, "auser", None)
    return user_key(await auser() if auser is not None else getattr(request, "user", None))


async def _auser_or_ip(request: HttpRequest) -> str | None:
    return await _auser(request) or _ip_key(request)


def _namespace(kind: str, name: str) -> str:
    # Quoted, so a name with a colon in it cannot pass for another name followed by part of a value.
    return f"{kind}:{quote(name, safe='')}:"


def _header_key(name: str) -> KeyFunction:
    namespace = _namespace("header", name.lower())  # header names are case-insensitive
    return lambda request: _prefixed(namespace, request.headers.get(name))


def _query_key(param: str) -> KeyFunction:
    namespace = _namespace("get", param)
    return lambda request: _prefixed(namespace, request.GET.get(param))


def _prefixed(namespace: str, value: str | None) -> str | None:
    return f"{namespace}{value}" if value else None


def is_builtin(spec: Any) -> bool:
    """A kind this module computes (and namespaces) itself, as opposed to a key function."""
    return isinstance(spec, str) and (spec in SIMPLE_KINDS or spec.startswith(PREFIXED_KINDS))


def resolve_key(spec: Any) -> KeyFunction | None:
    """The function computing a spec's key value (None for an unkeyed semaphore).

    A key function's own value is namespaced by ``key_for``, not here, so
    ``akey_for`` can still tell sync functions from async ones.
    """
    if spec is None:
        return None
    if callable(spec):
        function: KeyFunction = spec
        return function
    if spec == "ip":
        return _ip_key
    if spec == "user":
        return _user
    if spec == "user_or_ip":
        return _user_or_ip
    if isinstance(spec, str) and spec.startswith("header:"):
        return _header_key(spec[len("header:") :])
    if isinstance(spec, str) and spec.startswith("get:"):
        return _query_key(spec[len("get:") :])
    problem = key_problem(spec)
    if problem:
        raise ImproperlyConfigured(problem)
    imported: KeyFunction = import_string(spec)
    return imported


class NotLimited:
    """The key function returned None: this request is not limited by the semaphore."""


NOT_LIMITED = NotLimited()


def partition_value(value: Any, spec: Any) -> Any:
    """What the key function of ``spec`` returned, as a partition value: ``NOT_LIMITED`` for None or "", a key
    function's own namespaced (``custom:``) so it never passes for a built-in kind's."""
    if value is None or value == "":
        return NOT_LIMITED
    return value if is_builtin(spec) else f"{CUSTOM}{value}"


UserOf = Callable[[HttpRequest], Any]


def _with_user(function: KeyFunction, user_of: UserOf | None) -> KeyFunction:
    """``"user"`` and ``"user_or_ip"`` read ``user_of(request)`` instead of ``request.user``, when given.

    For a face whose stack authenticates inside the view and keeps the user
    elsewhere (Django Ninja's ``request.auth``): the key sees the user the
    view sees, under the same ``user:`` namespace as every other face.
    """
    if user_of is None:
        return function
    if function is _user:
        return lambda request: user_key(user_of(request))
    if function is _user_or_ip:
        return lambda request: user_key(user_of(request)) or _ip_key(request)
    return function


def key_for(request: HttpRequest, spec: Any, user_of: UserOf | None = None) -> Any:
    """The key value for ``request``: None for the whole semaphore, ``NOT_LIMITED`` to skip it.

    ``user_of``: where the request's user comes from, for the user kinds (``_with_user``).
    """
    function = resolve_key(spec)
    if function is None:
        return None
    value = _with_user(function, user_of)(request)
    if inspect.isawaitable(value):
        getattr(value, "close", lambda: None)()
        raise ImproperlyConfigured(f"Key function {spec!r} is async; it can only guard async views.")
    return partition_value(value, spec)


async def akey_for(request: HttpRequest, spec: Any, user_of: UserOf | None = None) -> Any:
    """``key_for`` inside an event loop: user lookups go through ``request.auser()`` (or ``user_of``, which
    must not touch the database), async key functions are awaited and sync ones run in a thread (they may).
    """
    function = resolve_key(spec)
    if function is None:
        return None
    if user_of is not None and function in (_user, _user_or_ip):
        return partition_value(_with_user(function, user_of)(request), spec)
    if function is _user:
        return partition_value(await _auser(request), spec)
    if function is _user_or_ip:
        return partition_value(await _auser_or_ip(request), spec)
    reads_headers_only = function is _ip_key or (isinstance(spec, str) and spec.startswith(PREFIXED_KINDS))
    if reads_headers_only or iscoroutinefunction(function):
        value = function(request)
    else:
        value = sync_to_async(function)(request)
    return partition_value(await value if inspect.isawaitable(value) else value, spec)
