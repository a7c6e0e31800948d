"""A waiting room's settings: ``"waiting_room": True`` or a dict on a ``SEMAPHORES`` entry.

A semaphore with a waiting room counts visitors, not requests: a visitor let
in holds one permit for as long as they keep making requests (plus ``lease``),
and a visitor who finds it full waits in the semaphore's first-come,
first-served line, asking again every ``refresh`` seconds, until their turn
(docs/guides/waiting-room.md). This module is the option's shape: its
defaults, its checks (``django_semaphore.E020``, with the semaphore options a
room cannot work with) and the parsed ``RoomOptions`` the engine and the
request path read. It knows nothing of requests: what the request path does
with ``status``, ``template``, the bypass rules and the cookie is in ``web/``.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

# Every key of a waiting_room dict (reference/settings.md); any other is E018.
ROOM_OPTIONS = (
    "refresh",
    "abandon",
    "status",
    "template",
    "bypass_paths",
    "bypass_methods",
    "bypass_unsafe_methods",
    "bypass_permission",
    "bypass_staff",
    "cookie",
    "session",
    "session_renewal",
    "client_places",
    "client_tickets_per_minute",
    "prequeue",
    "opens",
    "queueing",
    "new_users_per_minute",
    "proof_of_work",
)
DEFAULT_REFRESH = 10.0
# A waiter who asks nothing for this many refresh intervals has left the line.
ABANDON_REFRESHES = 3
DEFAULT_STATUS = 503
DEFAULT_TEMPLATE = "django_semaphore/waiting_room.html"
DEFAULT_PERMISSION = "django_semaphore.bypass_waiting_room"
COOKIE_PREFIX = "semaphore_room_"
# A room's visit lasts this long after the visitor's last response when the entry sets no `lease`.
DEFAULT_VISIT_LEASE = 300.0
# The longest a visit lasts from its start (seconds): then the visitor goes through the room again.
DEFAULT_SESSION = 600.0
# Places (in line and inside) one client address may hold at once, and new places it may take a minute: an
# office, a school or a mobile carrier's NAT puts many people behind one address, so these are generous;
# one script holding hundreds of places is what they stop.
DEFAULT_CLIENT_PLACES = 50
DEFAULT_CLIENT_TICKETS_PER_MINUTE = 30
# A client at its bound has each of its places checked (core/lua/room.lua): the bound bounds that work too.
MAX_CLIENT_PLACES = 1000
# Queueing methods: first come, first served; or in a random order (an early arrival gains nothing).
QUEUEING = ("fifo", "random")
# The proof of work's default difficulty (`"proof_of_work": True`): leading zero bits of a SHA-256; a browser
# solves it in well under a second (docs/performance.md); a script pays as much again for every place.
DEFAULT_WORK_BITS = 16
MAX_WORK_BITS = 32
MAX_SECONDS = 10 * 365 * 86400
# Statuses whose responses have no body: a queue page must have one.
BODYLESS = (204, 205, 304)
# RFC 6265's cookie-name (an RFC 7230 token).
COOKIE_NAME = re.compile(r"^[!#$%&'*+\-.^_`|~0-9A-Za-z]{1,100}$")
METHOD = re.compile(r"^[A-Za-z]{1,20}$")
# Methods whose requests change things (Django's CSRF protection guards them): a room passes them by only
# when its entry says it knows (bypass_unsafe_methods), since a script then sends them past a full room.
SAFE_METHODS = ("GET", "HEAD", "OPTIONS", "TRACE")
PERMISSION = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*\.[A-Za-z0-9_]+$")


@dataclass(frozen=True)
class RoomOptions:
    """One semaphore's waiting room, every default filled in."""

    refresh: float = DEFAULT_REFRESH
    abandon: float = DEFAULT_REFRESH * ABANDON_REFRESHES
    status: int = DEFAULT_STATUS
    template: str = DEFAULT_TEMPLATE
    bypass_paths: tuple[str, ...] = ()
    bypass_methods: tuple[str, ...] = ()
    bypass_permission: str | None = DEFAULT_PERMISSION
    bypass_staff: bool = True
    cookie: str = ""
    session: float | None = DEFAULT_SESSION
    session_renewal: bool = True
    client_places: int | None = DEFAULT_CLIENT_PLACES
    client_tickets_per_minute: int | None = DEFAULT_CLIENT_TICKETS_PER_MINUTE
    # The launch mode: the pre-queue opens at `prequeue` and the room at `opens` (epoch ms; 0: none); who came
    # before the opening is shuffled (a place by a keyed hash of its ticket). `queueing`: "fifo" or "random".
    prequeue_ms: int = 0
    opens_ms: int = 0
    queueing: str = "fifo"
    new_users_per_minute: int | None = None
    # Leading zero bits of the puzzle a visitor solves before it takes a place (web/room_proof.py); 0: none.
    proof_of_work: int = 0

    @classmethod
    def from_option(cls, name: str, value: object) -> RoomOptions | None:
        """The room ``value`` (the entry's ``waiting_room``) declares; None for False or None. Checked first."""
        if value is None or value is False:
            return None
        spec: Mapping[str, Any] = value if isinstance(value, Mapping) else {}
        refresh = float(spec.get("refresh", DEFAULT_REFRESH))
        return cls(
            refresh=refresh,
            abandon=float(spec.get("abandon", refresh * ABANDON_REFRESHES)),
            status=spec.get("status", DEFAULT_STATUS),
            template=spec.get("template", DEFAULT_TEMPLATE),
            bypass_paths=_strings(spec.get("bypass_paths")),
            bypass_methods=tuple(method.upper() for method in _strings(spec.get("bypass_methods"))),
            bypass_permission=spec.get("bypass_permission", DEFAULT_PERMISSION),
            bypass_staff=bool(spec.get("bypass_staff", True)),
            cookie=spec.get("cookie") or COOKIE_PREFIX + name,
            session=_optional_float(spec.get("session", DEFAULT_SESSION)),
            session_renewal=bool(spec.get("session_renewal", True)),
            client_places=spec.get("client_places", DEFAULT_CLIENT_PLACES),
            client_tickets_per_minute=spec.get("client_tickets_per_minute", DEFAULT_CLIENT_TICKETS_PER_MINUTE),
            prequeue_ms=_epoch_ms(spec.get("prequeue")),
            opens_ms=_epoch_ms(spec.get("opens")),
            queueing=spec.get("queueing", "fifo"),
            new_users_per_minute=spec.get("new_users_per_minute"),
            proof_of_work=_work_bits(spec.get("proof_of_work")),
        )

    def visit_lease(self, lease: float) -> float:
        """How long a visit lasts after a request (``lease``), or, without renewal, its whole session."""
        if not self.session_renewal and self.session is not None:
            return self.session
        return lease

    def visit_cap(self, max_hold: float | None) -> float | None:
        """The longest a visit lasts from its start: its session, or the entry's ``max_hold`` if shorter."""
        caps = [cap for cap in (self.session, max_hold) if cap is not None]
        return min(caps) if caps else None

    @property
    def retry_after(self) -> int:
        """Retry-After of a queue page: the refresh interval, in whole seconds."""
        return max(math.ceil(self.refresh), 1)


def _epoch_ms(value: object) -> int:
    """A moment of the launch mode, as the server's clock counts (ms since the epoch): an aware datetime, an ISO
    8601 text with its offset, or seconds since the epoch; 0 for None."""
    if value is None:
        return 0
    if isinstance(value, str):
        value = datetime.fromisoformat(value)
    if isinstance(value, datetime):
        return int(value.timestamp() * 1000)
    return int(float(value) * 1000)  # type: ignore[arg-type]


def _moment_problem(where: str, option: str, value: object) -> str | None:
    if value is None:
        return None
    try:
        if isinstance(value, str):
            value = datetime.fromisoformat(value)
        if isinstance(value, datetime):
            return (
                None if value.tzinfo is not None else f"{where}[{option!r}] must carry its time zone (got {value!r})."
            )
        if isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value) and value > 0:
            return None
    except ValueError:
        pass
    return (
        f"{where}[{option!r}] must be an aware datetime, an ISO 8601 text with its offset or epoch seconds "
        f"(got {value!r})."
    )


def _launch_problems(where: str, spec: Mapping[str, Any]) -> list[str]:
    problems = [p for p in (_moment_problem(where, o, spec.get(o)) for o in ("prequeue", "opens")) if p]
    if not problems and spec.get("prequeue") is not None:
        if spec.get("opens") is None:
            problems.append(f"{where}['prequeue'] needs 'opens': the pre-queue waits for an opening.")
        elif _epoch_ms(spec["prequeue"]) >= _epoch_ms(spec["opens"]):
            problems.append(f"{where}['prequeue'] must come before 'opens'.")
    if spec.get("queueing", "fifo") not in QUEUEING:
        problems.append(f"{where}['queueing'] must be one of {', '.join(QUEUEING)} (got {spec.get('queueing')!r}).")
    work = spec.get("proof_of_work")
    if (
        work is not None
        and work is not True
        and work is not False
        and (not isinstance(work, int) or not 1 <= work <= MAX_WORK_BITS)
    ):
        problems.append(
            f"{where}['proof_of_work'] must be None, True ({DEFAULT_WORK_BITS} bits) or the leading zero bits "
            f"asked, 1 to {MAX_WORK_BITS} (got {work!r})."
        )
    rate = spec.get("new_users_per_minute")
    if rate is not None and (not isinstance(rate, int) or isinstance(rate, bool) or not 1 <= rate <= 1_000_000):
        problems.append(
            f"{where}['new_users_per_minute'] must be None or a whole number from 1 to 1000000 (got {rate!r})."
        )
    return problems


def _work_bits(value: object) -> int:
    if value is None or value is False:
        return 0
    return DEFAULT_WORK_BITS if value is True else int(value)  # type: ignore[call-overload]


def _optional_float(value: object) -> float | None:
    return None if value is None else float(value)  # type: ignore[arg-type]


def _strings(value: object) -> tuple[str, ...]:
    if value is None:
        return ()
    return (value,) if isinstance(value, str) else tuple(value)  # type: ignore[arg-type]


def _seconds(value: object) -> bool:
    if not isinstance(value, (int, float)) or isinstance(value, bool):
        return False
    return math.isfinite(value) and 0 < value <= MAX_SECONDS


def room_problems(name: object, options: Mapping[str, Any]) -> list[str]:
    """E020: everything wrong with the entry's ``waiting_room``, or with the entry for a room; [] without one."""
    value = options.get("waiting_room")
    if value is None or value is False:
        return []
    where = f"SEMAPHORES[{name!r}]['waiting_room']"
    if value is not True and not isinstance(value, Mapping):
        return [f"{where} must be True, False or a dict of the room's options (got {value!r})."]
    problems = _incompatible(name, options)
    spec: Mapping[str, Any] = value if isinstance(value, Mapping) else {}
    refresh = spec.get("refresh", DEFAULT_REFRESH)
    if not _seconds(refresh):
        problems.append(f"{where}['refresh'] must be a number of seconds > 0 (got {refresh!r}).")
    if "abandon" in spec:
        abandon = spec["abandon"]
        if not _seconds(abandon):
            problems.append(f"{where}['abandon'] must be a number of seconds > 0 (got {abandon!r}).")
        elif _seconds(refresh) and abandon <= refresh:
            problems.append(
                f"{where}['abandon'] ({abandon}) must be longer than 'refresh' ({refresh}): every waiter would "
                "lose its place between two of its own polls."
            )
    status = spec.get("status", DEFAULT_STATUS)
    if not isinstance(status, int) or isinstance(status, bool) or not 200 <= status <= 599 or status in BODYLESS:
        problems.append(
            f"{where}['status'] must be an HTTP status from 200 to 599 whose response has a body (got {status!r})."
        )
    template = spec.get("template", DEFAULT_TEMPLATE)
    if not isinstance(template, str) or not template:
        problems.append(f"{where}['template'] must be a template name (got {template!r}).")
    paths = spec.get("bypass_paths")
    if paths is not None and not isinstance(paths, (str, list, tuple)):
        problems.append(f"{where}['bypass_paths'] must be a regex or a list of them (got {paths!r}).")
    else:
        for pattern in _strings(paths):
            try:
                re.compile(pattern)
            except (re.error, TypeError) as exc:
                problems.append(f"{where}['bypass_paths'] {pattern!r} is not a regular expression: {exc}.")
    methods = spec.get("bypass_methods")
    if methods is not None and (
        not isinstance(methods, (str, list, tuple))
        or not all(isinstance(m, str) and METHOD.match(m) for m in _strings(methods))
    ):
        problems.append(f"{where}['bypass_methods'] must be a list of HTTP methods such as 'HEAD' (got {methods!r}).")
    else:
        problems += _unsafe_methods(where, spec)
    for flag in ("bypass_unsafe_methods", "bypass_staff"):
        if flag in spec and not isinstance(spec[flag], bool):
            problems.append(f"{where}[{flag!r}] must be True or False (got {spec[flag]!r}).")
    permission = spec.get("bypass_permission", DEFAULT_PERMISSION)
    if permission is not None and not (isinstance(permission, str) and PERMISSION.match(permission)):
        problems.append(
            f"{where}['bypass_permission'] must be None or a permission as 'app_label.codename' (got {permission!r})."
        )
    cookie = spec.get("cookie")
    if cookie is not None and not (isinstance(cookie, str) and COOKIE_NAME.match(cookie)):
        problems.append(
            f"{where}['cookie'] must be a cookie name: letters, digits and !#$%&'*+-.^_`|~ (got {cookie!r})."
        )
    problems += _session_problems(where, spec)
    problems += _launch_problems(where, spec)
    for option, most in (("client_places", MAX_CLIENT_PLACES), ("client_tickets_per_minute", 1_000_000)):
        bound = spec.get(option, 1)
        if bound is not None and (not isinstance(bound, int) or isinstance(bound, bool) or not 1 <= bound <= most):
            problems.append(
                f"{where}[{option!r}] must be None (no bound) or a whole number from 1 to {most} (got {bound!r})."
            )
    return problems


def _unsafe_methods(where: str, spec: Mapping[str, Any]) -> list[str]:
    """A bypassed POST (PUT, PATCH, DELETE...) lets a script do a view's work past a full room: said, or refused."""
    unsafe = [m.upper() for m in _strings(spec.get("bypass_methods")) if m.upper() not in SAFE_METHODS]
    if not unsafe or spec.get("bypass_unsafe_methods") is True:
        return []
    return [
        f"{where}['bypass_methods'] names {', '.join(unsafe)}: any client (a script with a CSRF token from any "
        "page) sends such a request past a full room to a view that does its work then. Bypass only "
        f"{', '.join(SAFE_METHODS)}, or set 'bypass_unsafe_methods': True if that is what you want."
    ]


def _session_problems(where: str, spec: Mapping[str, Any]) -> list[str]:
    session = spec.get("session", DEFAULT_SESSION)
    problems = []
    if session is not None and not _seconds(session):
        problems.append(f"{where}['session'] must be None (no maximum) or a number of seconds > 0 (got {session!r}).")
    renewal = spec.get("session_renewal", True)
    if not isinstance(renewal, bool):
        problems.append(f"{where}['session_renewal'] must be True or False (got {renewal!r}).")
    elif renewal is False and session is None:
        problems.append(
            f"{where}['session_renewal'] is False without a 'session': a visit would last forever. Set a session."
        )
    return problems


def _incompatible(name: object, options: Mapping[str, Any]) -> list[str]:
    """The entry's options a room cannot honour: it counts one visitor per ticket, in one fair line, site-wide."""
    where = f"SEMAPHORES[{name!r}]"
    problems = []
    if options.get("key") is not None:
        problems.append(f"{where} has a waiting room and a 'key': a room is one line for the whole site.")
    weight = options.get("weight", 1)
    if weight != 1 or isinstance(weight, bool):
        problems.append(f"{where} has a waiting room and a 'weight' of {weight!r}: a visitor takes one place.")
    wait = options.get("wait", 0)
    if isinstance(wait, (int, float)) and not isinstance(wait, bool) and wait > 0:
        problems.append(
            f"{where} has a waiting room and a 'wait' of {wait!r}: visitors wait in the room, not in a request."
        )
    if options.get("fair", True) is False:
        problems.append(f"{where} has a waiting room and 'fair': False: a room's line is first come, first served.")
    if isinstance(options.get("limit"), Mapping):
        problems.append(f"{where} has a waiting room and an adaptive limit: a room's limit counts visitors, fixed.")
    if options.get("replicas", 0) not in (0, None):
        problems.append(f"{where} has a waiting room and 'replicas': visits are not confirmed by replicas.")
    return problems


def has_room(options: object) -> bool:
    """The entry declares a waiting room (whatever is wrong with it: E020 says)."""
    return isinstance(options, Mapping) and options.get("waiting_room") not in (None, False)


def shared_cookies(rooms: Mapping[str, RoomOptions]) -> list[str]:
    """E023: rooms (name -> options) whose tickets share one cookie name: a visitor moving between them would
    leave a place behind in each, its ticket being the other room's (no ticket there)."""
    owners: dict[str, list[str]] = {}
    for name, options in rooms.items():
        owners.setdefault(options.cookie, []).append(name)
    return [
        f"Waiting rooms {', '.join(repr(n) for n in sorted(names))} share the cookie {cookie!r}: each room's ticket "
        "replaces the other's, so a visitor going from one to the other leaves a place behind each time."
        for cookie, names in sorted(owners.items())
        if len(names) > 1
    ]
