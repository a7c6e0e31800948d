"""The engine's settings: ``SEMAPHORES`` declares the named semaphores; flat ``SEMAPHORE_*``
settings hold app-wide defaults (the request path's own are in ``web/conf.py``).

Each declared semaphore is validated and parsed once, on first use, into a
``SemaphoreConfig`` that is cached until a setting changes (Django sends
``setting_changed`` from ``override_settings`` too), so the hot path never
re-validates and ``override_settings`` still just works.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from functools import cached_property
from typing import Any

from django.conf import settings
from django.core.exceptions import ImproperlyConfigured
from django.core.signals import setting_changed

from .adaptive import AdaptiveLimit, adaptive_problems, is_adaptive, keyed_problem, unknown_in_limit
from .options import unknown_problems, warn_unknown
from .redis_keys import check_name, check_prefix
from .room_options import DEFAULT_VISIT_LEASE, ROOM_OPTIONS, RoomOptions, room_problems
from .stripe_options import share, stripe_count, stripe_problems

ON_ERROR_CHOICES = ("allow", "deny")
# The HTTP status of a refusal because the limit is full: 503 (the server is busy) or 429 (this client
# asks too much at once, as rate limits answer). Outages and paused semaphores answer 503 either way.
STATUS_CHOICES = (503, 429)

APP_DEFAULTS: dict[str, Any] = {
    "SEMAPHORE_CONNECTION": "default",
    "SEMAPHORE_ASYNC_CONNECTION": None,
    "SEMAPHORE_KEY_PREFIX": "semaphore:",
    "SEMAPHORE_ON_ERROR": "allow",
    "SEMAPHORE_DEFAULT_LEASE": 60.0,
    "SEMAPHORE_WAITER_TTL": 1.0,
    # Seconds a keyed semaphore's partition keeps its keys after its last lease ends.
    "SEMAPHORE_PARTITION_IDLE": 86400.0,
    # Seconds between two summaries of a Redis outage in one process's log (core/outages.py).
    "SEMAPHORE_OUTAGE_LOG_INTERVAL": 60.0,
    # Seconds between two writes of a process's metrics counts to Redis (core/tally.py); None: none kept.
    "SEMAPHORE_METRICS_FLUSH_INTERVAL": 5.0,
}


def app_setting(name: str) -> Any:
    """One of the engine's ``SEMAPHORE_*`` settings, or its default."""
    return getattr(settings, name, APP_DEFAULTS[name])


def declared() -> Mapping[str, Mapping[str, Any]]:
    """``settings.SEMAPHORES``, or an empty mapping."""
    value = getattr(settings, "SEMAPHORES", None) or {}
    if not isinstance(value, Mapping):
        raise ImproperlyConfigured("settings.SEMAPHORES must be a dict of name -> options.")
    return value


def key_prefix() -> str:
    prefix = app_setting("SEMAPHORE_KEY_PREFIX")
    if isinstance(prefix, str) and prefix in _checked_prefixes:
        return prefix
    try:
        checked = check_prefix(prefix)
    except ValueError as exc:
        raise ImproperlyConfigured(str(exc)) from exc
    _checked_prefixes.add(checked)
    return checked


_checked_prefixes: set[str] = set()


# Every option a SEMAPHORES entry may set (reference/settings.md); any other key is E018 at
# `manage.py check` and, at run time, ignored with one warning (core/options.py).
OPTIONS = (
    "limit",
    "lease",
    "wait",
    "weight",
    "key",
    "on_error",
    "auto_renew",
    "view",
    "status",
    "replicas",
    "replica_timeout",
    "fair",
    "max_hold",
    "max_partitions",
    "waiting_room",
    "stripes",
)


def _option_dicts(name: object, options: Mapping[str, Any]) -> list[tuple[str, Mapping[Any, Any], tuple[str, ...]]]:
    """The entry itself and every option dict nested in it, as settings name them, with their known keys."""
    found = [(f"SEMAPHORES[{name!r}]", options, OPTIONS), *unknown_in_limit(name, options)]
    room = options.get("waiting_room")
    if isinstance(room, Mapping):
        found.append((f"SEMAPHORES[{name!r}]['waiting_room']", room, ROOM_OPTIONS))
    return found


def unknown_option_problems(name: object, options: Mapping[str, Any]) -> list[str]:
    """E018: keys of one SEMAPHORES entry (or of an option dict inside it) that no option of the app reads."""
    return [
        problem
        for where, found, known in _option_dicts(name, options)
        for problem in unknown_problems(where, found, known)
    ]


# Upper bounds that keep every number exact in Lua (whose numbers print as
# "%.14g") and every duration a valid Redis expiry in ms.
MAX_SECONDS = 10 * 365 * 86400
MAX_LIMIT = 10**9


def _number(options: Mapping[str, Any], name: str) -> bool:
    """A finite number of seconds (NaN and infinity would reach Redis as garbage)."""
    value = options.get(name)
    return (
        isinstance(value, (int, float))
        and not isinstance(value, bool)
        and math.isfinite(value)
        and value <= MAX_SECONDS
    )


def option_problems(name: object, options: object) -> list[str]:
    """Everything wrong with one ``SEMAPHORES`` entry, in plain words.

    Shared by the system checks (which attach IDs and hints) and by
    ``get_semaphore`` (which refuses to run a misconfigured limit).
    """
    problems: list[str] = []
    try:
        check_name(name)
    except ValueError as exc:
        problems.append(str(exc))
    if not isinstance(options, Mapping):
        return [*problems, f"SEMAPHORES[{name!r}] must be a dict of options."]
    limit = options.get("limit")
    if is_adaptive(limit):
        limit = None  # its own problems: adaptive_problems (E016)
    elif not isinstance(limit, int) or isinstance(limit, bool) or not 1 <= limit <= MAX_LIMIT:
        problems.append(
            f"SEMAPHORES[{name!r}]['limit'] must be an integer from 1 to {MAX_LIMIT}, or an adaptive limit "
            f"(got {limit!r})."
        )
    if "lease" in options and (not _number(options, "lease") or options["lease"] <= 0):
        problems.append(f"SEMAPHORES[{name!r}]['lease'] must be a number of seconds > 0 (ten years at most).")
    if "wait" in options and (not _number(options, "wait") or options["wait"] < 0):
        problems.append(f"SEMAPHORES[{name!r}]['wait'] must be a number of seconds >= 0 (ten years at most).")
    weight = options.get("weight", 1)
    if not isinstance(weight, int) or isinstance(weight, bool) or weight < 1:
        problems.append(f"SEMAPHORES[{name!r}]['weight'] must be an integer >= 1.")
    elif isinstance(limit, int) and weight > limit:
        problems.append(f"SEMAPHORES[{name!r}]['weight'] ({weight}) is above its limit ({limit}).")
    replicas = options.get("replicas", 0)
    if not isinstance(replicas, int) or isinstance(replicas, bool) or not 0 <= replicas <= 100:
        problems.append(f"SEMAPHORES[{name!r}]['replicas'] must be an integer from 0 to 100.")
    if "replica_timeout" in options and (not _number(options, "replica_timeout") or options["replica_timeout"] <= 0):
        problems.append(f"SEMAPHORES[{name!r}]['replica_timeout'] must be a number of seconds > 0.")
    if "fair" in options and not isinstance(options["fair"], bool):
        problems.append(f"SEMAPHORES[{name!r}]['fair'] must be True or False.")
    if options.get("max_hold") is not None and (not _number(options, "max_hold") or options["max_hold"] <= 0):
        problems.append(f"SEMAPHORES[{name!r}]['max_hold'] must be None or a number of seconds > 0.")
    on_error = options.get("on_error", "allow")
    if on_error not in ON_ERROR_CHOICES:
        problems.append(f"SEMAPHORES[{name!r}]['on_error'] must be one of {ON_ERROR_CHOICES} (got {on_error!r}).")
    cap = options.get("max_partitions")
    if cap is not None and (not isinstance(cap, int) or isinstance(cap, bool) or not 1 <= cap <= MAX_LIMIT):
        problems.append(f"SEMAPHORES[{name!r}]['max_partitions'] must be None or an integer from 1 to {MAX_LIMIT}.")
    key = options.get("key")
    if key is not None and not isinstance(key, str) and not callable(key):
        problems.append(f"SEMAPHORES[{name!r}]['key'] must be a key kind, a dotted path or a callable (got {key!r}).")
    status = options.get("status", 503)
    if type(status) is not int or status not in STATUS_CHOICES:
        problems.append(f"SEMAPHORES[{name!r}]['status'] must be 503 or 429 (got {status!r}).")
    view = options.get("view")
    if view is not None and not isinstance(view, str) and not callable(view):
        problems.append(f"SEMAPHORES[{name!r}]['view'] must be a view or the dotted path of one (got {view!r}).")
    return problems


# Whole semaphores keep an hour of utilisation history, a sample per 10 s at
# most; partitions (one per user, per IP...) keep none.
HISTORY_EVERY_MS = 10_000
HISTORY_KEEP = 360


@dataclass(frozen=True)
class SemaphoreConfig:
    """One declared semaphore with every default filled in."""

    name: str
    limit: int
    lease: float = 60.0
    wait: float = 0.0
    weight: int = 1
    key: Any = None
    on_error: str = "allow"
    auto_renew: bool = True
    waiter_ttl: float = 1.0
    options: Mapping[str, Any] = field(default_factory=dict)
    # Stricter mode: a grant counts only once this many replicas confirm it.
    replicas: int = 0
    replica_timeout: float = 0.1
    # First come, first served (the default), or a free permit to whoever asks first.
    fair: bool = True
    # Seconds a permit may be held at most (renewal stops there); None: no bound.
    # A request's lease and hold cap are worked out from these on the request path (web/conf.py).
    max_hold: float | None = None
    # Seconds a partition's keys outlive its last lease.
    partition_idle: float = 86400.0
    # Keyed semaphores: idle partitions kept at once; past it the oldest idle ones are evicted.
    max_partitions: int | None = None
    # An adaptive limit (core/adaptive.py); `limit` is then its initial value.
    adaptive: AdaptiveLimit | None = None
    # A waiting room (core/room_options.py): the limit counts visitors; `waiter_ttl` is its abandon time.
    room: RoomOptions | None = None
    # Hash tags the semaphore is spread over (core/stripe_options.py); 1: one, as any semaphore.
    stripes: int = 1

    @classmethod
    def from_options(cls, name: str, options: Mapping[str, Any]) -> SemaphoreConfig:
        problems = option_problems(name, options)
        if isinstance(options, Mapping):
            problems += adaptive_problems(name, options)
            keyed = keyed_problem(name, options)
            problems += [keyed] if keyed else []
            problems += room_problems(name, options)
            problems += stripe_problems(name, options)
        if problems:
            raise ImproperlyConfigured(" ".join(problems))
        for where, found, known in _option_dicts(name, options):
            warn_unknown(where, found, known)  # a rolling deploy: a newer release's option, ignored here
        room = RoomOptions.from_option(name, options.get("waiting_room"))
        default_lease = DEFAULT_VISIT_LEASE if room else app_setting("SEMAPHORE_DEFAULT_LEASE")
        lease = float(options.get("lease", default_lease))
        auto_renew = bool(options.get("auto_renew", True))
        max_hold = None if options.get("max_hold") is None else float(options["max_hold"])
        adaptive = AdaptiveLimit.from_spec(options["limit"]["adaptive"]) if is_adaptive(options["limit"]) else None
        return cls(
            name=name,
            limit=adaptive.initial if adaptive else options["limit"],
            adaptive=adaptive,
            lease=lease,
            wait=float(options.get("wait", 0.0)),
            weight=options.get("weight", 1),
            key=options.get("key"),
            on_error=options.get("on_error", app_setting("SEMAPHORE_ON_ERROR")),
            auto_renew=auto_renew,
            # A room's waiter is a visitor asking every `refresh` seconds: its place lasts `abandon` after each.
            waiter_ttl=room.abandon if room else float(app_setting("SEMAPHORE_WAITER_TTL")),
            options=dict(options),
            replicas=options.get("replicas", 0),
            replica_timeout=float(options.get("replica_timeout", 0.1)),
            fair=options.get("fair", True),
            max_hold=max_hold,
            partition_idle=float(app_setting("SEMAPHORE_PARTITION_IDLE")),
            max_partitions=options.get("max_partitions"),
            room=room,
            stripes=stripe_count(options),
        )

    def wire(self, partitioned: bool) -> bytes:
        """ARGV[1] of every script: this configuration as the scripts read it (see core/lua/common.lua)."""
        return self._wire_partition if partitioned else self._wire_whole

    def stripe_wire(self, stripe: int) -> bytes:
        """ARGV[1] of every script on stripe ``stripe``: its share of the limit (and of an adaptive rule's bounds)."""
        return self._wire_stripes[stripe]

    def stripe_limit(self, stripe: int) -> int:
        """Stripe ``stripe``'s share of the limit in settings (of an adaptive rule's initial limit)."""
        return share(self.limit, self.stripes, stripe)

    def stripe_adaptive(self, stripe: int) -> AdaptiveLimit | None:
        """Stripe ``stripe``'s adaptive rule: the semaphore's, within its share of min, max and initial.

        Each stripe runs the rule on its own holds: the stripes' limits add up
        to one within min and max, and each move is one script on one stripe
        (core/stripe_limits.py).
        """
        spec = self.adaptive
        if spec is None:
            return None
        low, high, initial = (share(n, self.stripes, stripe) for n in (spec.min, spec.max, spec.initial))
        return replace(spec, min=low, max=high, initial=initial)

    def _encode(self, every_ms: int, whole: bool, stripe: int | None = None) -> bytes:
        ttl_ms = max(int(self.waiter_ttl * 1000), 1)
        idle_ms = max(int(self.partition_idle * 1000), 1)
        limit, adaptive = self.limit, self.adaptive
        if stripe is not None:
            limit, adaptive = self.stripe_limit(stripe), self.stripe_adaptive(stripe)
        text = f"{limit} {ttl_ms} {every_ms} {HISTORY_KEEP} {idle_ms} {int(self.fair)} {int(whole)}"
        # A room (never adaptive: E020) ends with " room": the scripts treat its line as visitors' (common.lua);
        # its launch mode adds the opening (ms) and new visitors a minute (0: none).
        if self.room is not None:
            room = self.room
            launch = (
                f" {room.opens_ms} {room.new_users_per_minute or 0}"
                if room.opens_ms or room.new_users_per_minute
                else ""
            )
            return (text + " room" + launch).encode()
        return (text + (adaptive.wire() if adaptive else "")).encode()

    @cached_property
    def _wire_stripes(self) -> tuple[bytes, ...]:
        return tuple(self._encode(HISTORY_EVERY_MS, whole=True, stripe=stripe) for stripe in range(self.stripes))

    @cached_property
    def _wire_whole(self) -> bytes:
        return self._encode(HISTORY_EVERY_MS, whole=True)

    @cached_property
    def _wire_partition(self) -> bytes:
        return self._encode(0, whole=False)


_configs: dict[str, SemaphoreConfig] = {}


def config_for(name: str) -> SemaphoreConfig | None:
    """The parsed configuration of semaphore ``name``, or None if it is not declared."""
    config = _configs.get(name)
    if config is None:
        options = declared().get(name)
        if options is None:
            return None
        config = _configs[name] = SemaphoreConfig.from_options(name, options)
    return config


def _forget_configs(**kwargs: Any) -> None:
    _configs.clear()


setting_changed.connect(_forget_configs, dispatch_uid="django_semaphore.conf")
