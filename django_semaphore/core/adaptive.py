"""Adaptive limits: the settings shape, its validation, and what the scripts say about them.

``"limit": {"adaptive": {...}}`` in a ``SEMAPHORES`` entry lets the release
script move the limit in force between ``min`` and ``max`` from the hold
times it observes (AIMD, server-side: ``core/lua/adaptive.lua``). This module
is the Python half: it checks the shape (system checks E016 and E017,
``SemaphoreConfig``), writes the parameters onto the configuration argument
the scripts read, and reads the rule's state back for status and signals.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, TypeGuard

# The largest limit a semaphore may have (core/conf.py's MAX_LIMIT; kept here so conf imports this module).
MAX_LIMIT = 10**9
MAX_WINDOW = 86400.0
MIN_WINDOW = 0.1
DEFAULTS: dict[str, Any] = {"target": None, "window": 1.0, "backoff": 0.9, "tolerance": 2.0}
FIELDS = ("min", "max", "initial", "target", "window", "backoff", "tolerance")


def state_float(value: str | None) -> float | None:
    """A number from the state hash, or None for a missing or garbled one, as the scripts' ``tonumber``
    reads it: a field edited by hand, or half-written, must not break status for the operator."""
    try:
        number = float(value) if value else None
    except ValueError:
        return None
    return number if number is not None and math.isfinite(number) else None


def state_int(value: str | None) -> int | None:
    """``state_float``, as a whole number."""
    number = state_float(value)
    return None if number is None else int(number)


def is_adaptive(limit: object) -> TypeGuard[Mapping[Any, Any]]:
    """The ``limit`` option is a dict, so an adaptive limit (whatever is wrong inside it: E016 says)."""
    return isinstance(limit, Mapping)


def _int(value: object) -> TypeGuard[int]:
    return isinstance(value, int) and not isinstance(value, bool)


def _real(value: object) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def adaptive_problems(name: object, options: Mapping[str, Any]) -> list[str]:
    """Everything wrong with an adaptive ``limit`` (E016), in plain words; [] for a fixed limit."""
    limit = options.get("limit")
    if not isinstance(limit, Mapping):
        return []
    where = f"SEMAPHORES[{name!r}]['limit']"
    spec = limit.get("adaptive")
    if not isinstance(spec, Mapping):
        return [f"{where} must be an integer or {{'adaptive': {{'min': ..., 'max': ..., 'initial': ...}}}}."]
    where += "['adaptive']"
    problems: list[str] = []  # unknown keys, here and beside 'adaptive', are E018's (unknown_in_limit)
    low, high, initial = spec.get("min"), spec.get("max"), spec.get("initial")
    ints = {"min": low, "max": high, "initial": initial}
    for key, value in ints.items():
        if not _int(value) or not 1 <= value <= MAX_LIMIT:
            problems.append(f"{where}[{key!r}] must be an integer from 1 to {MAX_LIMIT} (got {value!r}).")
    if _int(low) and _int(high) and _int(initial) and not low <= initial <= high:
        problems.append(f"{where} needs min <= initial <= max (got {low}, {initial}, {high}).")
    target = spec.get("target")
    if target is not None and (not _real(target) or not 0 < target <= MAX_WINDOW):
        problems.append(f"{where}['target'] must be None or a number of seconds > 0 (got {target!r}).")
    window = spec.get("window", DEFAULTS["window"])
    if not _real(window) or not MIN_WINDOW <= window <= MAX_WINDOW:
        problems.append(f"{where}['window'] must be a number of seconds from {MIN_WINDOW} (got {window!r}).")
    backoff = spec.get("backoff", DEFAULTS["backoff"])
    if not _real(backoff) or not 0 < backoff < 1:
        problems.append(f"{where}['backoff'] must be a number between 0 and 1, both excluded (got {backoff!r}).")
    tolerance = spec.get("tolerance", DEFAULTS["tolerance"])
    if not _real(tolerance) or not 1 < tolerance <= 1000:
        problems.append(f"{where}['tolerance'] must be a number above 1 (got {tolerance!r}).")
    weight = options.get("weight", 1)
    if _int(weight) and _int(low) and weight > low:
        problems.append(
            f"SEMAPHORES[{name!r}]['weight'] ({weight}) is above its adaptive min ({low}): a request could "
            "never fit once the limit came down."
        )
    return problems


# The keys of an adaptive limit's two dicts: {"adaptive": {...}} and the spec inside it.
LIMIT_FIELDS = ("adaptive",)


def unknown_in_limit(name: object, options: Mapping[str, Any]) -> list[tuple[str, Mapping[Any, Any], tuple[str, ...]]]:
    """Where an adaptive limit may hold keys nobody reads: (the dict as settings name it, the dict, its known keys)."""
    limit = options.get("limit")
    if not isinstance(limit, Mapping):
        return []
    where = f"SEMAPHORES[{name!r}]['limit']"
    found: list[tuple[str, Mapping[Any, Any], tuple[str, ...]]] = [(where, limit, LIMIT_FIELDS)]
    spec = limit.get("adaptive")
    if isinstance(spec, Mapping):
        found.append((f"{where}['adaptive']", spec, FIELDS))
    return found


def keyed_problem(name: object, options: Mapping[str, Any]) -> str | None:
    """E017: adaptive limits are for whole semaphores (one rule, one signal per change, site-wide)."""
    if is_adaptive(options.get("limit")) and options.get("key") is not None:
        return (
            f"SEMAPHORES[{name!r}] has an adaptive limit and a 'key': adaptive limits apply to whole semaphores only."
        )
    return None


@dataclass(frozen=True)
class AdaptiveLimit:
    """The parameters of one semaphore's adaptive limit (seconds, as in settings)."""

    min: int
    max: int
    initial: int
    target: float | None = None
    window: float = 1.0
    backoff: float = 0.9
    tolerance: float = 2.0

    @classmethod
    def from_spec(cls, spec: Mapping[str, Any]) -> AdaptiveLimit:
        values = {**DEFAULTS, **spec}
        return cls(
            min=values["min"],
            max=values["max"],
            initial=values["initial"],
            target=None if values["target"] is None else float(values["target"]),
            window=float(values["window"]),
            backoff=float(values["backoff"]),
            tolerance=float(values["tolerance"]),
        )

    def wire(self) -> str:
        """The adaptive fields of the configuration argument (core/lua/common.lua's header), space first."""
        target_ms = 0 if self.target is None else max(round(self.target * 1000), 1)
        window_ms = max(round(self.window * 1000), 1)
        # repr: the shortest text that reads back as the same float (Lua's tonumber reads "1e-07" too), so
        # a value the checks accept is never rounded to one the scripts refuse (0 or 1).
        return f" {self.min} {self.max} {self.initial} {target_ms} {window_ms} {self.backoff!r} {self.tolerance!r}"


@dataclass(frozen=True)
class AdaptiveStatus:
    """Where an adaptive limit stands: the rule's limit, its bounds, and its last move."""

    limit: int
    min: int
    max: int
    initial: int
    target_s: float | None
    window_s: float
    best_hold_s: float | None
    changed_at_ms: int | None
    reason: str | None

    @classmethod
    def read(cls, spec: AdaptiveLimit, state: Mapping[str, str]) -> AdaptiveStatus:
        """From the state hash's fields (as text): the rule's limit is clamped as the scripts clamp it."""
        raw = state_int(state.get("alimit"))
        limit = max(spec.min, min(spec.max, spec.initial if raw is None else raw))
        best = state_float(state.get("best"))
        return cls(
            limit=limit,
            min=spec.min,
            max=spec.max,
            initial=spec.initial,
            target_s=spec.target,
            window_s=spec.window,
            best_hold_s=None if best is None else round(best / 1000, 4),
            changed_at_ms=state_int(state.get("alimit_at")),
            reason=state.get("alimit_why") or None,
        )


@dataclass(frozen=True)
class LimitChange:
    """The adaptive rule moved the limit, as a release's reply says (core/lua/release.lua)."""

    old_limit: int
    new_limit: int
    reason: str


def release_reply(reply: Any) -> tuple[bool, LimitChange | None]:
    """A release's reply: whether the lease was held, and the limit's move if this release made one."""
    if isinstance(reply, (list, tuple)):
        # A fifth element says what keys vanished (core/vanished.py); then a reason of "" is no change.
        released, old, new, reason, *_vanished = reply
        text = reason.decode() if isinstance(reason, bytes) else str(reason)
        return bool(released), LimitChange(int(old), int(new), text) if text else None
    return bool(reply), None
