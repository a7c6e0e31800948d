"""One call of the engine, from what its caller asks to what the Lua scripts receive.

- **What an acquire takes**: ``AcquireOptions``, the keyword arguments of
  ``acquire``, ``attempt`` and their asyncio twins, named, typed and
  documented here once (``keyword_options`` gives them to each method).
- **One acquire, decided before its first round trip**: ``AcquireRequest``.
  Every value is checked first (no caller, an old client in a rolling deploy
  included, may store what would break the semaphore for everyone), and the
  call's holder token, its nonce and its holder metadata are minted.
- **The argument contract with the scripts**: every script takes the same
  seven keys and, as ``ARGV[1]``, the semaphore's configuration (see
  ``core/lua/common.lua``); what follows is the operation's own. ``Calls`` is
  the one place that knows those positions, so no caller builds a script's
  arguments by hand.
"""

from __future__ import annotations

import functools
import inspect
import json
import math
import os
import secrets
import socket
import threading
from collections.abc import Awaitable, Callable, Coroutine
from dataclasses import dataclass
from functools import lru_cache
from typing import Any, Concatenate, ParamSpec, TypeVar

from django.utils.crypto import salted_hmac

from .conf import MAX_LIMIT, MAX_SECONDS, SemaphoreConfig, key_prefix
from .redis_keys import SemaphoreKeys

# -- the argument contract with the scripts ----------------------------------------------------


@dataclass(frozen=True)
class ScriptCall:
    """One script to run: its name, KEYS and ARGV."""

    script: str
    keys: list[str]
    args: list[Any]


def wire(text: str | bytes) -> bytes:
    """Text as sent to Redis; operators' and callers' input may hold any code point."""
    return text if isinstance(text, bytes) else str(text).encode("utf-8", "surrogatepass")


@dataclass(frozen=True)
class Calls:
    """The script calls of one semaphore (or one partition of it, or one stripe of a striped one)."""

    keys: SemaphoreKeys
    config: bytes  # the wire form of its SemaphoreConfig (ARGV[1])
    # Which stripe of a striped semaphore these calls reach (core/stripe_layout.py); None: not a stripe.
    stripe: int | None = None

    @classmethod
    def of(cls, config: SemaphoreConfig, partition: str | None) -> Calls:
        """The calls of ``config``'s semaphore, or of one partition of it (by hash)."""
        keys = SemaphoreKeys.build(key_prefix(), config.name, partition)
        return cls(keys, config.wire(partition is not None))

    def wake_key(self, token: str) -> str:
        """``SemaphoreKeys.wake``, put together here: every acquire names one."""
        return self.keys.wake_prefix + token

    def acquire(
        self,
        token: str,
        *,
        weight: int,
        lease_ms: int,
        waiting: bool,
        claim_ms: int,
        hold_ms: int,
        nonce: str,
        not_after_ms: int,
        grant_before_ms: int,
        metadata: bytes,
    ) -> ScriptCall:
        keys = [*self.keys.common, self.wake_key(token)]
        mode = "wait" if waiting else "try"
        request = f"{token} {weight} {lease_ms} {mode} {claim_ms} {hold_ms} {nonce} {not_after_ms} {grant_before_ms}"
        return ScriptCall("acquire", keys, [self.config, request.encode(), metadata])

    def release(self, token: str, *, nonce: str = "", fence: int | None = None) -> ScriptCall:
        """Give back what ``token`` holds; with ``nonce`` or ``fence``, only that one grant.

        Either says the caller is unsure what the token holds (a clean-up, a
        retry whose first reply was lost), so a miss is not counted.
        """
        return ScriptCall(
            "release", self.keys.common, [self.config, wire(token), nonce, b"" if fence is None else fence]
        )

    def renew(self, token: str, lease_ms: int) -> ScriptCall:
        return ScriptCall("renew", self.keys.common, [self.config, wire(token), lease_ms])

    def cancel(self, token: str, nonce: str, *, unblock: bool = False, tombstone: bool = False) -> ScriptCall:
        """Leave the line; give back a grant made for the call ``nonce`` names; ``unblock`` wakes its wait.

        ``tombstone``: the call was interrupted, its acquire may still be on its
        way (a hung server runs what it buffered when it resumes): refuse it then.
        """
        keys = [*self.keys.common, self.wake_key(token)]
        mode = b"2" if tombstone else b"1" if unblock else b"0"
        return ScriptCall("cancel", keys, [self.config, token, nonce, mode])

    def evict(self) -> ScriptCall:
        """Delete this partition's keys if it is idle (no holder, no waiter, no limit override)."""
        return ScriptCall("evict_partition", self.keys.common, [self.config])

    def status(self, max_holders: int, history: bool) -> ScriptCall:
        return ScriptCall("status", self.keys.common, [self.config, max_holders, b"1" if history else b"0"])

    def force_release(self, token: str) -> ScriptCall:
        """Take ``token``'s permit away."""
        return ScriptCall("force_release", self.keys.common, [self.config, b"one", wire(token)])

    def force_release_step(self, cursor: bytes, start: bytes) -> ScriptCall:
        """Take away the permits of the holders at the next step of a pass over them (``b"0"`` begins one)
        that were granted by ``start`` (the last fence when the first pass began; ``b"0"`` on the first call)."""
        return ScriptCall("force_release", self.keys.common, [self.config, b"all", cursor, start])

    def set_limit(self, operation: str, value: int = 0) -> ScriptCall:
        """``operation``: "set" (to ``value``), "add" (``value``, may be negative) or "clear"."""
        return ScriptCall("set_limit", self.keys.common, [self.config, operation, value])

    def stripe_limit(self, generation: int, phase: str, action: str, value: int = 0) -> ScriptCall:
        """One stripe's step of a striped semaphore's limit change (core/lua/stripe_limit.lua)."""
        return ScriptCall("stripe_limit", self.keys.common, [self.config, generation, phase, action, value])

    def room(self, action: str, metadata: bytes = b"", client: str | None = None) -> ScriptCall:
        """A waiting room's operation (core/lua/room.lua): "visit <token> <lease_ms> <hold_ms> <renew> <places>
        <per_minute>", "figures", "let_in <n>" or "queue_all <0|1>"; ``client``: the visitor's address, hashed."""
        keys = [*self.keys.common, self.keys.room]
        if client is not None:
            keys += self.keys.room_client(client)
        return ScriptCall("room", keys, [self.config, action.encode(), metadata])


# -- what an acquire takes -----------------------------------------------------------------------


class _Default:
    """The semaphore's own setting applies (None means something else: "no bound")."""

    def __repr__(self) -> str:
        return "DEFAULT"


DEFAULT: Any = _Default()


@dataclass(kw_only=True, slots=True)
class AcquireOptions:
    """The keyword arguments of ``acquire()``, ``attempt()`` and their asyncio twins.

    ``wait``, ``weight``, ``lease``, ``auto_renew`` and ``max_hold`` default
    to the semaphore's settings (None, or DEFAULT for ``max_hold``, whose None
    means "no bound"); the others to none.

    - ``wait``: seconds to wait in line; 0 answers at once. A deadline for the
      whole call: a Redis that does not answer makes it raise
      ``BackendUnavailable`` after ``wait`` (plus 0.2 s to leave the line), or
      one socket timeout when ``wait`` is 0.
    - ``weight``: permits to take at once (1 to the limit); it waits its turn
      in line like any other call.
    - ``lease``: seconds the permit lives unless renewed.
    - ``identity``: a caller-chosen holder id: acquiring again while held
      returns the same permit, renewed; another weight raises ``WeightMismatch``.
    - ``label``, ``metadata``: shown to operators next to the holder (host
      and pid are added; each value is cut to 200 characters, extra fields
      past 2,000 bytes are left out).
    - ``auto_renew``: keep renewing the lease in the background.
    - ``on_lost``: called with the permit if a renewal finds the lease gone,
      or when it reaches ``max_hold``.
    - ``max_hold``: seconds the permit may be held at most, renewals included
      (None: no bound).
    """

    wait: float | None = None
    weight: int | None = None
    lease: float | None = None
    identity: str | None = None
    label: str | None = None
    metadata: dict[str, Any] | None = None
    auto_renew: bool | None = None
    on_lost: Callable[[Any], object] | None = None
    max_hold: float | None = DEFAULT

    def request(self, config: SemaphoreConfig, calls: Calls) -> AcquireRequest:
        """Check every value (no caller may corrupt the shared state) and fix the call."""
        weight = _weight(config.weight if self.weight is None else self.weight)
        lease = _seconds(config.lease if self.lease is None else self.lease, "lease", zero_allowed=False)
        wait = _seconds(config.wait if self.wait is None else self.wait, "wait", zero_allowed=True)
        hold = config.max_hold if self.max_hold is DEFAULT else self.max_hold
        hold_ms = 0 if hold is None else max(int(_seconds(hold, "max_hold", zero_allowed=False) * 1000), 1)
        identity = self.identity
        if identity is not None and not isinstance(identity, str):
            raise TypeError(f"identity must be a string, not {type(identity).__name__}.")
        # One draw of 192 random bits: 128 for the token, 64 for the nonce (one system call, not two).
        drawn = secrets.token_hex(24)
        return AcquireRequest(
            calls=calls,
            token=identity_token(identity) if identity is not None else drawn[:32],
            # Marked as this version's ("n"): the scripts keep the record of its permit of one in the state
            # hash, and a release that hands it a permit knows it reads it there (core/lua/common.lua's `folded`).
            nonce="n" + drawn[32:],
            weight=weight,
            lease_ms=max(int(lease * 1000), 1),
            hold_ms=hold_ms,
            metadata=holder_metadata(self.label, self.metadata),
            wait=wait,
            waiter_ttl=config.waiter_ttl,
            replicated=config.replicas > 0,
        )

    def renewed(self, config: SemaphoreConfig) -> bool:
        """Whether the permit is renewed in the background (``auto_renew``, or the semaphore's setting)."""
        return config.auto_renew if self.auto_renew is None else self.auto_renew


@dataclass(kw_only=True, slots=True)
class SyncAcquireOptions(AcquireOptions):
    """``AcquireOptions``, and what only a blocking call takes.

    - ``cancel``: a ``threading.Event``; setting it from another thread ends
      the wait at once, as if it had run out (core/cancel.py). An asyncio task
      cancels its ``aacquire()`` by being cancelled instead.
    """

    cancel: threading.Event | None = None


def _seconds(value: object, name: str, *, zero_allowed: bool) -> float:
    """A per-call duration, checked as the settings are: a finite number, at most ten years."""
    if not isinstance(value, (int, float)) or isinstance(value, bool):
        raise TypeError(f"{name} must be a number of seconds, not {type(value).__name__}.")
    if not math.isfinite(value) or value < 0 or (value == 0 and not zero_allowed) or value > MAX_SECONDS:
        bound = ">= 0" if zero_allowed else "> 0"
        raise ValueError(f"{name} must be a finite number of seconds {bound} (ten years at most), not {value!r}.")
    return float(value)


def _weight(value: object) -> int:
    if not isinstance(value, int) or isinstance(value, bool):
        raise TypeError(f"weight must be an integer, not {type(value).__name__}.")
    if not 1 <= value <= MAX_LIMIT:
        raise ValueError(f"weight must be an integer from 1 to {MAX_LIMIT}, not {value!r}.")
    return value


Named = ParamSpec("Named")
Options = TypeVar("Options", bound=AcquireOptions)
Owner = TypeVar("Owner")
Result = TypeVar("Result")


def _signature(method: Callable[..., Any], options: Callable[..., Any]) -> inspect.Signature:
    """``method``'s own ``self`` and return, with ``options``' keyword arguments in between (for help())."""
    own = inspect.signature(method)
    first = next(iter(own.parameters.values()))
    return own.replace(parameters=[first, *inspect.signature(options).parameters.values()])


def _made(options: Callable[Named, Options], method: Any, /, *args: Named.args, **kwargs: Named.kwargs) -> Options:
    """The options of one call; a wrong argument is the method's ``TypeError``, as for any function."""
    try:
        return options(*args, **kwargs)
    except TypeError as error:
        raise TypeError(str(error).replace(f"{options.__qualname__}.__init__()", f"{method.__qualname__}()")) from None


def keyword_options(
    options: Callable[Named, Options],
) -> Callable[[Callable[[Owner, Options], Result]], Callable[Concatenate[Owner, Named], Result]]:
    """Give a method that takes one ``options`` object the options' keyword arguments, named and typed.

    The arguments are spelled once, as the fields of ``options``; a wrong
    name or a positional argument raises ``TypeError`` as for any function.
    """

    def named(method: Callable[[Owner, Options], Result]) -> Callable[Concatenate[Owner, Named], Result]:
        @functools.wraps(method)
        def call(owner: Owner, /, *args: Named.args, **kwargs: Named.kwargs) -> Result:
            return method(owner, _made(options, method, *args, **kwargs))

        call.__signature__ = _signature(method, options)  # type: ignore[attr-defined]
        return call

    return named


def akeyword_options(
    options: Callable[Named, Options],
) -> Callable[
    [Callable[[Owner, Options], Awaitable[Result]]], Callable[Concatenate[Owner, Named], Coroutine[Any, Any, Result]]
]:
    """``keyword_options`` for a coroutine method: what it gives is a coroutine function too."""

    def named(
        method: Callable[[Owner, Options], Awaitable[Result]],
    ) -> Callable[Concatenate[Owner, Named], Coroutine[Any, Any, Result]]:
        @functools.wraps(method)
        async def call(owner: Owner, /, *args: Named.args, **kwargs: Named.kwargs) -> Result:
            return await method(owner, _made(options, method, *args, **kwargs))

        call.__signature__ = _signature(method, options)  # type: ignore[attr-defined]
        return call

    return named


# -- one acquire, decided before its first round trip ------------------------------------------


@dataclass(frozen=True)
class AcquireRequest:
    """Everything one acquire call sends, decided once, before the first round trip."""

    calls: Calls
    token: str
    nonce: str
    weight: int
    lease_ms: int
    hold_ms: int
    metadata: bytes
    wait: float
    waiter_ttl: float
    # Grants count only once replicas confirm them: a handed permit is confirmed by a renewal.
    replicated: bool

    @property
    def claim_ms(self) -> int:
        """Two of its own TTLs, as the acquire script takes it: how long it keeps its ticket after a missed beat."""
        return max(int(self.waiter_ttl * 2000), 1)

    @property
    def handed_claim_ms(self) -> int:
        """How long a permit a release hands this waiter lives until it renews it: one of its own TTLs.

        A waiter that died in line ties the permit that long at most; a live
        one renews it to its full lease before its acquire returns (``must_confirm``).
        """
        return max(self.claim_ms // 2, 1)

    def must_confirm(self, alive: bool) -> bool:
        """Whether a handed permit must be renewed before it is reported granted.

        Always when its lease is longer than the claim it was handed on: a
        server stall past the claim, right after the grant, would otherwise
        let the next caller reclaim the permit while this one, told it holds
        it, is inside (a permit acquired directly survives such a stall: its
        whole lease is in force when ``acquire`` returns). Within the claim,
        only when the grant cannot be shown alive (``alive``, core/flow.py)
        or replicas must confirm it.
        """
        return not alive or self.replicated or self.lease_ms > self.handed_claim_ms

    @property
    def wake_key(self) -> str:
        return self.calls.wake_key(self.token)

    def acquire_call(self, not_after_ms: int, grant_before_ms: int = 0) -> ScriptCall:
        return self.calls.acquire(
            self.token,
            weight=self.weight,
            lease_ms=self.lease_ms,
            waiting=self.wait > 0,
            claim_ms=self.claim_ms,
            hold_ms=self.hold_ms,
            nonce=self.nonce,
            not_after_ms=not_after_ms,
            grant_before_ms=grant_before_ms,
            metadata=self.metadata,
        )

    def cancel_call(self, *, unblock: bool = False, tombstone: bool = False) -> ScriptCall:
        return self.calls.cancel(self.token, self.nonce, unblock=unblock, tombstone=tombstone)

    def confirm_call(self) -> ScriptCall:
        return self.calls.renew(self.token, self.lease_ms)

    def release_call(self) -> ScriptCall:
        """Give back the grant this call was made, and only that one (a grant that raced a cancel)."""
        return self.calls.release(self.token, nonce=self.nonce)


# -- the call's token, nonce and holder metadata -------------------------------------------------

# A holder's metadata is for operators' screens: each value is cut to this many
# characters, and the whole document to METADATA_LIMIT bytes by leaving out
# the caller's extra fields (never by cutting the JSON itself).
VALUE_LIMIT = 200
METADATA_LIMIT = 2000
ELLIPSIS = "…"


# What every identity's token starts with (a random token is hex): a striped semaphore sends an identity's
# calls to one stripe (core/stripe_lanes.py).
IDENTITY_PREFIX = "id-"


def identity_token(identity: str) -> str:
    """A holder token derived from the identity, keyed with SECRET_KEY.

    Whoever knows an identity but not the site's secret still cannot forge
    the token that releases or renews its permit.
    """
    digest = salted_hmac("django_semaphore.identity", wire(identity), algorithm="sha256")
    return IDENTITY_PREFIX + digest.hexdigest()[:32]


@lru_cache(maxsize=1)
def _host() -> str:
    return socket.gethostname()


def _short(value: Any) -> Any:
    if isinstance(value, (bool, int, float)) or value is None:
        return value
    text = value if isinstance(value, str) else str(value)
    if len(text) > VALUE_LIMIT:
        text = text[: VALUE_LIMIT - 1] + ELLIPSIS
    # A lone surrogate (from a path Django decoded with surrogateescape) has no UTF-8 form.
    return text.encode("utf-8", "replace").decode("utf-8")


def _encoded(document: dict[str, Any]) -> bytes:
    return json.dumps(document, ensure_ascii=False).encode("utf-8")


def holder_metadata(label: str | None, extra: dict[str, Any] | None) -> bytes:
    """Host, pid, label and the caller's own fields, as JSON that is always whole."""
    if not extra:
        return _plain_metadata(label, os.getpid())
    try:
        return _text_metadata(label, tuple(extra.items()), os.getpid())
    except TypeError:  # a value that cannot be a cache key (a list, a dict): encoded each time
        return _metadata(label, extra)


@lru_cache(maxsize=256)
def _text_metadata(label: str | None, extra: tuple[tuple[Any, Any], ...], pid: int) -> bytes:
    """A request's fields (its method and path) come back with every request to a URL: encoded once each."""
    return _metadata(label, dict(extra))


@lru_cache(maxsize=256)
def _plain_metadata(label: str | None, pid: int) -> bytes:
    """A process asks with the same few labels over and over: encoded once each (per pid: forks)."""
    return _metadata(label, None)


def _metadata(label: str | None, extra: dict[str, Any] | None) -> bytes:
    """The JSON document itself.

    Every value is shortened on its own; extra fields that would take the
    document past its limit are left out (and ``"truncated": true`` says so),
    so host, pid and label always survive.
    """
    document: dict[str, Any] = {"host": _short(_host()), "pid": os.getpid(), "label": _short(label)}
    whole = dict(document)
    for field, value in (extra or {}).items():
        whole.setdefault(_short(str(field)), _short(value))
    encoded = _encoded(whole)
    if len(encoded) <= METADATA_LIMIT:
        return encoded  # the common case (a request's path and method): encoded once
    budget = METADATA_LIMIT - len(b', "truncated": true')
    for field, value in (extra or {}).items():
        name = _short(str(field))
        if name in document:
            continue
        candidate = {**document, name: _short(value)}
        if len(_encoded(candidate)) > budget:
            document["truncated"] = True
            break
        document = candidate
    return _encoded(document)
