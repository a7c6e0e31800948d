"""The Lua operations, and the two ways a server runs them.

``lua/common.lua`` and ``lua/adaptive.lua`` are the prelude; each other file
is the body of one operation. From the same files come:

- **a Redis Functions library** (Redis 7.0+, Valkey 7.2+), loaded once and
  called with ``FCALL``: its helpers are defined once, not on every call,
  which is most of what a script costs the server on the common path, and
  it survives a restart where the server persists its data. Its name
  carries a digest of its source, so processes of two versions of this app
  (a rolling deploy) each call their own functions, and a server that lost
  them gets them again on the first call that finds them missing;
- **one script per operation** (prelude, then the body), sent with
  ``EVAL`` the first time (the server caches it), then run with ``EVALSHA``,
  and sent again when the server answers ``NOSCRIPT``: for servers without
  Functions (Redis 6.x, KeyDB, Dragonfly, Garnet) and users who may not run
  or load them.

Which one is decided per server and user, in each process, on the first
call, and logged once; it is decided again when the server forgets what it had
(``Function not found``, ``NOSCRIPT``), since the server may have changed
(a failover to an upgraded replica, a library loaded by an operator). Only a
call that needs the answer loads the library again: the background thread's
own calls that can wait (the metrics' counts, its looks at Redis during an
outage: ``load=False``) never do, so an operator's ``FUNCTION FLUSH`` is not
undone behind their back while the site is idle. The
state a script keeps between calls (the prelude's caches) is only ever a
cache: an ``EVALSHA`` script starts from nothing on every call.

The logic lives in one generator per exchange (``exchange``), which yields
what to send and receives the replies, so the sync and asyncio clients run
the very same decisions (``_drive`` and ``_adrive``), and so do the
connections of calls with a deadline (core/bounded.py, through ``drive``).
"""

from __future__ import annotations

import hashlib
import logging
import time
import weakref
from collections.abc import Callable, Generator, Iterable
from dataclasses import dataclass, field
from functools import cache
from importlib.resources import files
from typing import Any

from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import NoPermissionError, NoScriptError, ResponseError

from . import __version__
from .calls import ScriptCall
from .clients import AsyncClient, SyncClient
from .errors import ScriptsLost, is_outage

logger = logging.getLogger("django_semaphore.scripts")

OPERATIONS = (
    "acquire",
    "release",
    "renew",
    "cancel",
    "status",
    "force_release",
    "set_limit",
    "admit_partition",
    "evict_partition",
    "settle_evictions",
    "room",
    "tally",
    "metric_series",
    "stripe_limit",
    "stripe_plan",
)

# The helpers every operation shares, in this order (adaptive.lua uses common.lua's).
PRELUDE = ("common", "adaptive")

# Operations with a fast path for their common case (lua/fast.lua): a function that answers the call,
# or returns nil having written nothing, and the full operation then runs on the same call.
FAST_PATHS = {"acquire": "fast_acquire", "release": "fast_release"}
# Whether the library and the scripts are built with them: the tests run the whole engine without
# them too (tests/conftest.py), so every case keeps being proved on the full operations alone.
fast_paths_enabled = True

LIBRARY_PREFIX = "django_semaphore_"
FUNCTIONS, EVALSHA = "functions", "evalsha"

# Which version's library a process uses, so ``semaphore_scripts --clean`` (and a newer version,
# once it has loaded its own) removes only libraries nobody runs: a key per library, refreshed by
# every client at most every HEARTBEAT_EVERY seconds, alive for HEARTBEAT_TTL.
HEARTBEAT_KEY = "django_semaphore:library:"
HEARTBEAT_EVERY = 60.0
HEARTBEAT_TTL = 600.0

# Rounds of one exchange at most: FCALL, load, FCALL again; or EVALSHA, EVAL.
MAX_ROUNDS = 4


def _text(name: str) -> str:
    return (files("django_semaphore.core") / "lua" / f"{name}.lua").read_text()


def _prelude() -> str:
    return "".join(_text(name) for name in PRELUDE)


def _operation_function(operation: str) -> str:
    """An operation's body as a local function of the prelude's helpers, the same in both ways."""
    return f"\nlocal function {operation}_operation(keys, args)\n  begin(keys, args)\n{_text(operation)}\nend\n"


def app_version() -> str:
    return __version__


def _fast(operation: str) -> str | None:
    """The fast path's function name for ``operation`` (None: it has none, or they are switched off)."""
    return FAST_PATHS.get(operation) if fast_paths_enabled else None


def _fast_source() -> str:
    """The fast paths' Lua (fast.lua, then each operation's), or nothing when they are switched off."""
    if not fast_paths_enabled:
        return ""
    return _text("fast") + "".join(_text(name) for name in FAST_PATHS.values())


def _entry(operation: str) -> str:
    """The Lua function a library registers for ``operation``: its fast path first, if it has one."""
    fast = _fast(operation)
    if fast is None:
        return f"{operation}_operation"
    return f"function(keys, args) return {fast}(keys, args) or {operation}_operation(keys, args) end"


@cache
def library() -> tuple[str, str]:
    """The library's name and source."""
    prelude = _prelude() + _fast_source()
    digest = hashlib.sha1((prelude + "".join(_text(name) for name in OPERATIONS)).encode()).hexdigest()
    name = LIBRARY_PREFIX + digest[:12]
    parts = [f"#!lua name={name}\n-- django-semaphore {app_version()}\n", prelude]
    for operation in OPERATIONS:
        parts.append(_operation_function(operation))
        parts.append(f"redis.register_function('{name}_{operation}', {_entry(operation)})\n")
    return name, "".join(parts)


@dataclass(frozen=True)
class Script:
    """One operation as a script of its own: the prelude, the operation, and a call of it."""

    operation: str
    source: str
    # Its digest, taken once: every EVALSHA call names it, and hashing the 60-80 KB source took
    # 30-45 us of the client's CPU per call.
    sha: str = field(init=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "sha", hashlib.sha1(self.source.encode()).hexdigest())


@cache
def script(operation: str) -> Script:
    """``operation`` as an EVALSHA script (the prelude's ``local KEYS, ARGV`` hide the globals: kept first).

    With a fast path, the script runs it first, and defines the prelude and
    the full operation inside a function it calls only when the fast path
    returns nil: the common case pays for neither (EVALSHA compiles the
    whole script once; what each call pays for is what it runs).
    """
    head = (
        f"-- django-semaphore {app_version()} {operation} ({library()[0]})\n"
        "local SCRIPT_KEYS, SCRIPT_ARGV = KEYS, ARGV\n"
    )
    full = _prelude() + _operation_function(operation) + f"return {operation}_operation(SCRIPT_KEYS, SCRIPT_ARGV)\n"
    fast = _fast(operation)
    if fast is None:
        return Script(operation, head + full)
    source = (
        head
        + _text("fast")
        + _text(fast)
        + f"local fast_reply = {fast}(SCRIPT_KEYS, SCRIPT_ARGV)\n"
        + "if fast_reply then\n  return fast_reply\nend\n"
        + f"local function full_{operation}()\n{full}end\nreturn full_{operation}()\n"
    )
    return Script(operation, source)


def use_fast_paths(enabled: bool) -> None:
    """Build the library and the scripts with the fast paths or without them (for tests: both are proved)."""
    global fast_paths_enabled
    fast_paths_enabled = enabled
    library.cache_clear()
    script.cache_clear()


def function(operation: str) -> str:
    """The name the library registers ``operation`` under."""
    return f"{library()[0]}_{operation}"


def heartbeat_key(library_name: str) -> str:
    return HEARTBEAT_KEY + library_name


def heartbeat() -> tuple[Any, ...]:
    """The command that marks this version's library as used by a running process, for HEARTBEAT_TTL."""
    return ("SET", heartbeat_key(library()[0]), app_version(), "PX", int(HEARTBEAT_TTL * 1000))


# -- what a reply says about the way it was sent ------------------------------


def missing(error: object) -> bool:
    """The server does not have the library (yet, or any more)."""
    return isinstance(error, ResponseError) and "Function not found" in str(error)


def _unknown_command(error: object) -> bool:
    text = str(error).lower()
    return isinstance(error, ResponseError) and ("unknown command" in text or "unknown subcommand" in text)


def _denied(error: object, command: str) -> bool:
    """An ACL refusal of ``command`` itself (not of a key, nor of a command the script runs)."""
    return isinstance(error, NoPermissionError) and f"'{command}" in str(error).lower()


def _functions_unusable(error: object) -> bool:
    """FCALL answered that this server or user has no Functions at all."""
    return _unknown_command(error) or _denied(error, "fcall")


def _scripts_unusable(error: object) -> bool:
    """EVALSHA answered that this server or user runs no scripts (Lua switched off, ACL)."""
    text = str(error).lower()
    return (
        _unknown_command(error)
        or _denied(error, "evalsha")
        or _denied(error, "eval")
        or (isinstance(error, ResponseError) and "scripting" in text and "disabled" in text)
    )


def _load_refused(error: BaseException) -> bool:
    """A FUNCTION LOAD failure that means "not here, not for you" rather than "not now" (OOM, READONLY...)."""
    return _unknown_command(error) or isinstance(error, NoPermissionError) or not is_outage(error)


# -- the decision, per server and user ------------------------------------------


@dataclass
class _ServerState:
    """How one server runs the operations for one user, as far as this process knows."""

    where: str
    mode: str | None = None  # None: decide on the next call
    logged: str | None = None
    beat_at: float = field(default=-HEARTBEAT_EVERY)
    # Operations this process sent with EVAL since the server last answered NOSCRIPT: EVALSHA finds
    # them cached. The others go with EVAL (which caches them), rather than EVALSHA, NOSCRIPT, EVAL.
    sent: set[str] = field(default_factory=set)
    # A call of this process is removing older libraries: the others that loaded the library meanwhile
    # (a cold worker's first requests, all at once) leave it to that one.
    pruning: bool = False

    def decide(self, mode: str, because: object = None) -> None:
        self.mode = mode
        if mode == self.logged:
            return
        self.logged = mode
        if mode == FUNCTIONS:
            logger.info(
                "Redis at %s runs the semaphore operations as the Functions library %s.", self.where, library()[0]
            )
        else:
            logger.info(
                "Redis at %s runs the semaphore operations as scripts with EVALSHA: Functions are not usable (%s).",
                self.where,
                because,
            )


# Shared by the sync client and every event loop's asyncio client of one server and user: an
# asyncio client lives as long as its loop, which under WSGI is one request.
_states: dict[tuple[str, str], _ServerState] = {}
MAX_STATES = 1000


def _identity(client: SyncClient | AsyncClient) -> tuple[str, str]:
    """(where, user): the server a client reaches, as an operator names it, and as whom."""
    manager = getattr(client, "nodes_manager", None)
    if manager is not None:  # RedisCluster, sync or asyncio
        kwargs = client.get_connection_kwargs()
        where = "cluster " + min(manager.startup_nodes, default="?")
    else:
        pool = getattr(client, "connection_pool", None)
        kwargs = getattr(pool, "connection_kwargs", None) or {}
        service = getattr(pool, "service_name", None)
        if service is not None:
            where = f"sentinel service {service}"
        elif kwargs.get("path"):
            where = f"{kwargs['path']} db {kwargs.get('db', 0)}"
        elif "host" in kwargs:
            where = f"{kwargs['host']}:{kwargs.get('port', 6379)} db {kwargs.get('db', 0)}"
        else:
            where = f"{type(client).__name__} {id(client):#x}"
    return where, str(kwargs.get("username") or "default")


# Each client's state, found without working out its identity again (most of a call's own cost).
_by_client: weakref.WeakKeyDictionary[SyncClient | AsyncClient, _ServerState] = weakref.WeakKeyDictionary()


def state_of(client: SyncClient | AsyncClient) -> _ServerState:
    """How ``client``'s server runs the operations, as far as this process knows."""
    state = _by_client.get(client)
    if state is not None:
        return state
    identity = _identity(client)
    state = _states.get(identity)
    if state is None:
        if len(_states) >= MAX_STATES:
            _states.clear()
            _by_client.clear()
        state = _states[identity] = _ServerState(identity[0])
    _by_client[client] = state
    return state


def mode_of(client: SyncClient | AsyncClient) -> str | None:
    """ "functions" or "evalsha" once a call to ``client``'s server has decided; None before."""
    state = _states.get(_identity(client))
    return state.mode if state else None


# -- one exchange: what to send, and what the replies mean ----------------------


@dataclass(frozen=True)
class Batch:
    """Commands sent in one round trip; the replies come back in order, errors as values."""

    commands: list[tuple[Any, ...]]


@dataclass(frozen=True)
class Method:
    """One call of a client method (FUNCTION LOAD must reach every master of a Cluster)."""

    name: str
    args: tuple[Any, ...] = ()
    kwargs: dict[str, Any] = field(default_factory=dict)


Step = Batch | Method
Exchange = Generator[Step, Any, Any]


class NotLoaded(ResponseError):
    """The server lacks the library (``Function not found``), and the call may not load it."""


def _command(mode: str, call: ScriptCall, cached: set[str]) -> tuple[Any, ...]:
    head: tuple[Any, ...]
    if mode == FUNCTIONS:
        head = ("FCALL", function(call.script))
    elif call.script in cached:
        head = ("EVALSHA", script(call.script).sha)
    else:
        head = ("EVAL", script(call.script).source)
    return (*head, len(call.keys), *call.keys, *call.args)


def _other_way(mode: str, reply: object) -> bool:
    """The reply says the call did not run because of the way it was sent: retry it the right way."""
    if mode == FUNCTIONS:
        return missing(reply) or _functions_unusable(reply)
    return isinstance(reply, NoScriptError)


def exchange(
    client: SyncClient | AsyncClient, calls: list[ScriptCall], extra: list[tuple[Any, ...]], *, load: bool = True
) -> Exchange:
    """Run ``calls``, then ``extra`` (such as WAIT), in one round trip whichever way the server takes.

    Returns the calls' replies and the extra commands' replies, errors as values. ``load=False``: never
    ``FUNCTION LOAD``; a call the server has no library for gets ``NotLoaded`` (scripts run with
    ``EVALSHA`` as always: that way has nothing to install, a script is sent when the server lacks it).
    """
    state = state_of(client)
    mode = state.mode or FUNCTIONS
    forget = False  # decide again on the next call
    beat = _heartbeat_due(state)
    results: dict[int, Any] = {}
    pending = list(range(len(calls)))
    for _ in range(MAX_ROUNDS):
        replies = yield Batch([*(_command(mode, calls[i], state.sent) for i in pending), *beat, *extra])
        retry = [i for i, reply in zip(pending, replies, strict=False) if _other_way(mode, reply)]
        results.update((i, reply) for i, reply in zip(pending, replies, strict=False) if i not in retry)
        if mode == EVALSHA:
            state.sent.update(calls[i].script for i in pending if i not in retry)
        extra_replies = replies[len(pending) + len(beat) :]
        beat = []  # sent once
        if not retry:
            if mode == EVALSHA and any(_scripts_unusable(reply) for reply in results.values()):
                forget = True  # refused: ask for Functions again next time (an operator may load them)
            if forget:
                state.mode = None
            elif state.mode != mode:
                state.decide(mode)
            return [results[i] for i in range(len(calls))], extra_replies
        problem = replies[pending.index(retry[0])]
        if not load and missing(problem):
            gone = NotLoaded(f"Not loaded again (a call that needs it will): {problem}")
            return [gone if i in retry else results[i] for i in range(len(calls))], extra_replies
        pending = retry
        if mode == EVALSHA:  # NOSCRIPT: the cache was lost; send the sources, and decide again next time
            state.sent.clear()
            forget = True
            continue
        if missing(problem):
            loaded = yield Method("function_load", (library()[1],), {"replace": True})
            if not isinstance(loaded, BaseException):
                state.decide(FUNCTIONS)
                yield from _prune(client)
                continue
            if not _load_refused(loaded):  # not now (OOM, READONLY...): the failure policy decides
                return [loaded if i in retry else results[i] for i in range(len(calls))], extra_replies
            problem = f"FUNCTION LOAD: {loaded}"
        mode = EVALSHA
        state.decide(EVALSHA, because=problem)
    raise ScriptsLost(f"The semaphore operations could not be run: {problem}")


def _heartbeat_due(state: _ServerState) -> list[tuple[Any, ...]]:
    now = time.monotonic()
    if now - state.beat_at < HEARTBEAT_EVERY:
        return []
    state.beat_at = now
    return [heartbeat()]


def _prune(client: SyncClient | AsyncClient) -> Exchange:
    """Having loaded its library, remove older versions' that no process has used for HEARTBEAT_TTL.

    Best effort: a user who may not list or delete libraries leaves them to
    ``semaphore_scripts --clean``. Safe even when wrong: a process whose
    library is gone loads it again (or runs EVALSHA) on its next call. One
    call of a process at a time: the listing goes on the client's own pool,
    where each of 16 threads that loaded the library at once opened a
    connection of its own for it (over TLS, a handshake and an SSL context
    each, eating into their requests' time).
    """
    state = state_of(client)
    state.beat_at = time.monotonic()
    yield Batch([heartbeat()])
    if state.pruning:
        return
    state.pruning = True
    try:
        yield from _prune_others(library()[0])
    finally:
        state.pruning = False


def _prune_others(own: str) -> Exchange:
    listed = yield Method("function_list", (), {"library": LIBRARY_PREFIX + "*"})
    if isinstance(listed, BaseException):
        return
    others = sorted(name for name in library_names(listed) if name != own)
    if not others:
        return
    alive = yield Batch([("EXISTS", heartbeat_key(name)) for name in others])
    for name, beating in zip(others, alive, strict=True):
        if beating == 0:
            yield Method("function_delete", (name,))


def library_names(listed: Any) -> set[str]:
    """The library names in a ``FUNCTION LIST`` reply."""
    names = {entry_fields(entry).get("library_name") for reply in per_master(listed) for entry in reply or []}
    return {name for name in names if isinstance(name, str)}


def per_master(listed: Any) -> list[Any]:
    """A ``FUNCTION LIST`` reply, one per master (a Cluster client answers a dict of them, by node)."""
    if isinstance(listed, dict) and not any(_str(key) == "library_name" for key in listed):
        return list(listed.values())
    return [listed]


def entry_fields(entry: Any) -> dict[str, Any]:
    """A FUNCTION LIST entry (RESP2: a flat list of names and values; RESP3: a map) as a dict."""
    pairs: Iterable[tuple[Any, Any]] = (
        entry.items() if isinstance(entry, dict) else zip(entry[::2], entry[1::2], strict=False)
    )
    return {_str(key): _str(value) for key, value in pairs}


def _str(value: Any) -> Any:
    return value.decode() if isinstance(value, bytes) else value


# -- running an exchange on a sync or an asyncio client -------------------------


def perform(client: SyncClient, step: Step) -> Any:
    """One step on a sync client: a method call, or commands in one round trip (errors as values)."""
    if isinstance(step, Method):
        try:
            return getattr(client, step.name)(*step.args, **step.kwargs)
        except ResponseError as error:
            return error
    if len(step.commands) == 1:
        try:
            # Unannotated in redis-py; mypy's untyped_calls_exclude does not reach a method called on a union.
            return [client.execute_command(*step.commands[0])]  # type: ignore[no-untyped-call]
        except ResponseError as error:
            return [error]
    pipe = client.pipeline(transaction=False)
    for command in step.commands:
        pipe.execute_command(*command)
    return pipe.execute(raise_on_error=False)


async def _aperform(client: AsyncClient, step: Step) -> Any:
    if isinstance(step, Method):
        try:
            return await getattr(client, step.name)(*step.args, **step.kwargs)
        except ResponseError as error:
            return error
    if len(step.commands) == 1:
        try:
            return [await client.execute_command(*step.commands[0])]
        except ResponseError as error:
            return [error]
    pipe = client.pipeline(transaction=False)
    for command in step.commands:
        pipe.execute_command(*command)
    return await pipe.execute(raise_on_error=False)


def drive(perform: Callable[[Step], Any], steps: Exchange) -> Any:
    """Run an exchange, each step sent and its replies read by ``perform``."""
    try:
        step = next(steps)
        while True:
            step = steps.send(perform(step))
    except StopIteration as done:
        return done.value


def _drive(client: SyncClient, steps: Exchange) -> Any:
    return drive(lambda step: perform(client, step), steps)


async def _adrive(client: AsyncClient, steps: Exchange) -> Any:
    try:
        step = next(steps)
        while True:
            step = steps.send(await _aperform(client, step))
    except StopIteration as done:
        return done.value


def raised(reply: Any) -> Any:
    if isinstance(reply, BaseException):
        raise reply
    return reply


def direct(state: _ServerState, call: ScriptCall) -> tuple[Any, ...] | None:
    """The command for ``call`` when it can go alone, the way already decided: None, when ``exchange`` must send it.

    That is every call but a process's first to a server, the ones an
    EVALSHA script not yet sent makes, and the heartbeat's every few minutes:
    the common call then skips the exchange's bookkeeping.
    """
    mode = state.mode
    if mode is None or (mode == EVALSHA and call.script not in state.sent):
        return None
    if time.monotonic() - state.beat_at >= HEARTBEAT_EVERY:
        return None
    return _command(mode, call, state.sent)


def sent_directly(state: _ServerState, command: tuple[Any, ...], error: BaseException) -> bool:
    """Whether ``direct``'s ``command`` answered as it would have in an exchange; False: send it with ``exchange``.

    False when the reply says the call did not run because of the way it was
    sent (no library, NOSCRIPT): ``exchange`` then does what it does for
    those, and the call runs once. Judged by the way ``command`` went, not
    the state's now: another call may have met the same loss and changed it
    meanwhile. A refusal of scripts makes the next call ask for Functions
    again, as ``exchange`` would.
    """
    mode = FUNCTIONS if command[0] == "FCALL" else EVALSHA
    if _other_way(mode, error):
        return False
    if mode == EVALSHA and _scripts_unusable(error):
        state.mode = None
    return True


def run(client: SyncClient, call: ScriptCall) -> Any:
    """Run one operation on a sync client."""
    state = state_of(client)
    command = direct(state, call)
    if command is not None:
        try:
            # Unannotated in redis-py, as in ``perform``.
            return client.execute_command(*command)  # type: ignore[no-untyped-call]
        except ResponseError as error:
            if sent_directly(state, command, error):
                raise
    return exchanged(client, call)


def exchanged(client: SyncClient, call: ScriptCall) -> Any:
    """``run`` through the exchange: a first call, or one whose direct way met a lost library or script."""
    (reply,), _ = _drive(client, exchange(client, [call], []))
    return raised(reply)


async def arun(client: AsyncClient, call: ScriptCall) -> Any:
    """Run one operation on an asyncio client."""
    state = state_of(client)
    command = direct(state, call)
    if command is not None:
        try:
            return await _asend(client, command)
        except ResponseError as error:
            if sent_directly(state, command, error):
                raise
    (reply,), _ = await _adrive(client, exchange(client, [call], []))
    return raised(reply)


async def _asend(client: AsyncClient, command: tuple[Any, ...]) -> Any:
    """``command`` on a connection of the client's pool, without the client's per-command code.

    As on the sync client (core/bounded.py's ``run``): a connection the
    server closed while it sat idle is found before sending, one found closed
    at sending is sent again on a new one (nothing reached the server), and
    anything else is raised, tried once. A cancelled or failed read
    disconnects the connection (redis-py's own doing), so none goes back to
    the pool with a reply left on it. A Cluster client, or one with a single
    connection of its own, is called as is.
    """
    pool = getattr(client, "connection_pool", None)
    if pool is None or getattr(client, "connection", None) is not None:
        return await client.execute_command(*command)
    connection = await pool.get_connection()
    try:
        if await _stale(connection):
            await connection.disconnect()
            await connection.connect()
        packed = connection.pack_command(*command)
        try:
            await connection.send_packed_command(packed, check_health=False)
        except RedisConnectionError:
            await connection.disconnect()
            await connection.connect()
            await connection.send_packed_command(packed, check_health=False)
        return await connection.read_response()
    finally:
        await pool.release(connection)


async def _stale(connection: Any) -> bool:
    """A pooled asyncio connection the server closed while it sat idle, or left with a reply on it.

    redis-py 8's pool does not look when its maintenance notifications are on
    (its default with RESP3); its ``can_read`` does. Before 8 the pool always
    looked, with ``can_read_destructive``, and connections had no ``can_read``.
    """
    check = getattr(connection, "can_read", None)
    if check is None:
        return False
    try:
        return bool(await check())
    except RedisConnectionError:
        return True


def run_pipeline(client: SyncClient, calls: list[ScriptCall], *, load: bool = True) -> list[Any]:
    """Run several operations in one round trip (a dashboard's partitions); errors come back as values.

    ``load=False``: never loading the library (``exchange``); a call it is missing for gets ``NotLoaded``.
    """
    replies, _ = _drive(client, exchange(client, calls, [], load=load))
    return list(replies)


def run_loaded(client: SyncClient, call: ScriptCall) -> Any:
    """Run one operation without ever loading the library: ``NotLoaded`` if the server has none."""
    (reply,), _ = _drive(client, exchange(client, [call], [], load=False))
    return raised(reply)


async def arun_pipeline(client: AsyncClient, calls: list[ScriptCall]) -> list[Any]:
    """``run_pipeline`` on an asyncio client."""
    replies, _ = await _adrive(client, exchange(client, calls, []))
    return list(replies)


def run_confirmed(client: SyncClient, call: ScriptCall, replicas: int, timeout_ms: int) -> Any:
    """Run an operation and ``WAIT`` for replicas on the same connection, in one round trip.

    WAIT counts the replicas that have the writes of *its own* connection,
    so the two commands share one pipeline. Returns (reply, replicas that
    confirmed).
    """
    (reply,), (acked,) = _drive(client, exchange(client, [call], [("WAIT", replicas, timeout_ms)]))
    return raised(reply), int(raised(acked))


async def arun_confirmed(client: AsyncClient, call: ScriptCall, replicas: int, timeout_ms: int) -> Any:
    """``run_confirmed`` on an asyncio client."""
    (reply,), (acked,) = await _adrive(client, exchange(client, [call], [("WAIT", replicas, timeout_ms)]))
    return raised(reply), int(raised(acked))


def load(client: SyncClient) -> None:
    """Load the library (on every master of a Cluster: redis-py sends FUNCTION LOAD to all)."""
    client.function_load(library()[1], replace=True)
