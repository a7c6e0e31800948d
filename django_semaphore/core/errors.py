"""The engine's exceptions, and which Redis errors are an outage (the failure policy applies) and which are bugs.

The exception classes are public as ``django_semaphore.exceptions`` (and
from ``django_semaphore`` itself); they are defined here so that the engine
imports nothing from outside ``core/``.

A reply such as OOM, MISCONF, BUSY or NOREPLICAS says the server will not
serve this command *right now*: every caller gets it, and it goes away once
the operator fixes the server. That is what the failure policy is for, so
these become ``BackendUnavailable`` just like a refused connection, and so
does a reply saying this server or user cannot run what the engine sends (an
unknown command, an ACL denial inside a script, Lua switched off). A reply
that says the command itself was wrong (WRONGTYPE, a wrong number of
arguments, a Lua error inside a script) would fail the same way on a healthy
server: turning it into the policy would hide a bug, so it surfaces.

redis-py gives some refusals a class of their own and leaves the rest a bare
``ResponseError`` whose message starts with the reply's code; a pipeline
puts "Command # n (...) of pipeline caused error:" in front, and servers
before Redis 7 wrap an error raised inside a script in "Error running
script ...". So the code is looked for in the message as well as the class.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from contextlib import contextmanager

import redis.exceptions


class SemaphoreError(Exception):
    """Base class, so callers can catch everything this app raises."""


class UnknownSemaphore(SemaphoreError, LookupError):
    """A name that ``settings.SEMAPHORES`` does not declare.

    Raised instead of silently creating a limit nobody configured: a typo in a
    decorator must not turn into an unlimited (or unrelated) semaphore.
    """

    def __init__(self, name: str, known: list[str]) -> None:
        self.name = name
        self.known = sorted(known)
        listed = ", ".join(self.known) or "none"
        super().__init__(f"Unknown semaphore {name!r}; settings.SEMAPHORES declares: {listed}.")


class SemaphoreFull(SemaphoreError):
    """No permit was free within the wait allowed, or the semaphore is paused.

    ``retry_after`` is whole seconds until a permit is expected to come free
    (the sooner of the earliest lease end and the typical hold, both measured
    by the server; at least 1), which is what a ``Retry-After`` header needs;
    a paused semaphore's is ``PAUSED_RETRY_AFTER``, since no lease says when
    an operator resumes it. ``partition`` is the hash of the full partition of
    a keyed semaphore (None for a whole one), as ``Semaphore.partition``.
    """

    def __init__(
        self,
        name: str,
        partition: str | None = None,
        retry_after: int = 1,
        *,
        used: int | None = None,
        limit: int | None = None,
        waiting: int | None = None,
    ) -> None:
        self.name = name
        self.partition = partition
        self.retry_after = retry_after
        self.used = used
        self.limit = limit
        self.waiting = waiting
        state = "paused" if self.paused else "full"
        super().__init__(f"Semaphore {name!r} is {state}; retry after {retry_after}s.")

    @property
    def paused(self) -> bool:
        """An operator paused the semaphore (its limit is 0): waiting longer would not help."""
        return self.limit == 0


class WeightAboveLimit(SemaphoreError, ValueError):
    """A permit asked for more weight than the semaphore's whole limit.

    Such a request could never be granted, so it fails at once instead of
    waiting forever.
    """


class WeightMismatch(SemaphoreError, ValueError):
    """An identity asked again with another weight than the permit it holds or waits for.

    One identity is one holder: its permit cannot change size, so the second
    request is refused rather than counted at either weight.
    """


class BackendUnavailable(SemaphoreError):
    """Redis could not be reached or did not answer in time.

    The Django layer turns this into the semaphore's ``on_error`` policy;
    direct callers decide for themselves. ``name`` and ``partition`` say
    which semaphore it was, so a fail-closed answer can use that
    semaphore's own ``view``.
    """

    def __init__(self, message: str, *, name: str | None = None, partition: str | None = None) -> None:
        self.name = name
        self.partition = partition
        super().__init__(message)


class ConnectionMisconfigured(redis.exceptions.ConnectionError):
    """redis-py cannot make a connection from a connection setting, so no call reaches Redis until it is fixed.

    TLS options on a ``redis://`` location (the docs' example with ``rediss://``
    mistyped), an option redis-py does not know, a cache alias ``CACHES``
    lacks, a factory that raises. redis-py builds a client from any options
    and refuses them only when it opens a connection, as a ``TypeError``.
    core/connection.py raises this instead, where the client is asked for:
    a ``ConnectionError``, so that every caller meets an outage (the failure
    policy, a one-line error in the commands, a 503 from the dashboard and
    the metrics, E015 at ``check --deploy``), never a 500. ``problem`` is
    what went wrong, ``hint`` how to fix it; neither holds a password.
    """

    def __init__(self, where: str, problem: str, hint: str) -> None:
        self.where = where
        self.problem = problem
        self.hint = hint
        super().__init__(f"{where} cannot make a Redis connection: {problem}. {hint}")


class TooManyPartitions(BackendUnavailable):
    """No longer raised: kept so that code catching it still imports.

    ``max_partitions`` used to refuse a new key once a keyed semaphore kept
    that many partitions, which let anyone who can vary the key lock new
    clients out (or let them through unguarded). A new key is now always
    served and limited, and idle partitions are evicted to make room.
    """


class ScriptsLost(redis.exceptions.ResponseError):
    """The engine's scripts were missing at every round of one call, though each load succeeded.

    An operator flushing them in a loop, or a failover between rounds:
    the server's state, not this code's, so the failure policy decides.
    """


# Always an outage, whatever the message: the server is unreachable, hung,
# loading, or refusing a whole class of commands.
OUTAGE_ERRORS: tuple[type[Exception], ...] = (
    ScriptsLost,
    redis.exceptions.ConnectionError,  # also LOADING, a wrong password, too many clients
    redis.exceptions.TimeoutError,
    redis.exceptions.ClusterError,  # CLUSTERDOWN, MASTERDOWN
    redis.exceptions.TryAgainError,
    redis.exceptions.ReadOnlyError,
    redis.exceptions.OutOfMemoryError,
    redis.exceptions.NoPermissionError,  # an ACL change: the server's state, not this code's
)

# Reply codes that describe the server's state, not the command.
REFUSAL_CODES = frozenset(
    {
        "OOM",  # maxmemory reached (with noeviction)
        "MISCONF",  # writes stopped after a failed RDB save
        "BUSY",  # another script runs past busy-reply-threshold
        "NOREPLICAS",  # min-replicas-to-write not met
        "LOADING",
        "MASTERDOWN",
        "CLUSTERDOWN",
        "TRYAGAIN",
        "READONLY",
        "NOPERM",
        "UNBLOCKED",  # a blocked read cut short by a role change
    }
)
# Refusals sent as plain ERR, known by their wording (lower case). The
# server lacks a command the engine sends (Redis 6 has no FCALL; Garnet runs
# no Lua unless told to), or does not let this user run one, or a key, inside
# a script: Redis before 7.2 says so without the NOPERM code ("The user
# executing the script can't run this command..."), later ones with "ACL
# failure in script". Or a script's key whose slot moved to another node
# mid-migration, or Dragonfly refusing a key the script did not declare.
# Each would answer every call the same until the operator changes the
# server, the ACL or the connection: what the failure policy is for.
# An ACL's refusals, in every server's wording: at the top level, and of a command or key inside a script.
ACL_PHRASES = ("user executing the script can't", "acl failure in script", "no permissions to")
REFUSAL_PHRASES = (
    "attempted to access a non local key",
    "unknown command",
    "unknown subcommand",
    *ACL_PHRASES,
    "scripting support disabled",
    "tried accessing undeclared key",
)

# The codes redis-py strips from the message of the classes it gives them.
_STRIPPED_CODES: tuple[tuple[type[Exception], str], ...] = (
    (redis.exceptions.OutOfMemoryError, "OOM"),
    (redis.exceptions.ReadOnlyError, "READONLY"),
    (redis.exceptions.NoPermissionError, "NOPERM"),
    (redis.exceptions.MasterDownError, "MASTERDOWN"),
    (redis.exceptions.ClusterDownError, "CLUSTERDOWN"),
    (redis.exceptions.TryAgainError, "TRYAGAIN"),
    (redis.exceptions.BusyLoadingError, "LOADING"),
)
# Greedy: the command echoed inside the note may itself hold any text, the
# server's reply is what follows the note's last occurrence.
_PIPELINE_NOTE = re.compile(r"^Command # \d+ \(.*\) of pipeline caused error: ", re.DOTALL)
_WRAPPED_CODE = re.compile(r": -?([A-Z]{2,})\b")
# "Error running script (call to f_ab12): @user_script:1: @user_script: 1: -OOM command not allowed..."
_SCRIPT_FRAME = re.compile(r"^Error running script \(call to [^)]*\):(?: @?\w+: ?\d+:)* -?")


# redis-py's asyncio I/O, where a task's command can meet a reader or writer that another task's disconnect
# cleared under it (its Cluster client reconnecting after a connection error): an ``AttributeError`` or
# ``TypeError`` of ``None`` (redis-py 8.1 and before; redis/redis-py#4287), which is a connection lost
# mid-command, not a bug. Known by where it was raised: in one of these functions of these modules (or in
# asyncio's transports below them), never in the code that builds a command.
_ASYNC_IO_MODULES = ("/redis/asyncio/connection.py", "/redis/_parsers/")
_ASYNC_IO_FUNCTIONS = frozenset(
    {"send_packed_command", "_send_packed_command", "read_response", "read_from_socket", "_read_from_socket",
     "_readline", "_read", "readline", "read", "can_read_destructive"}
)  # fmt: skip
_ASYNCIO = "/asyncio/"


def lost_mid_command(error: BaseException) -> redis.exceptions.ConnectionError | None:
    """``error`` as the ``ConnectionError`` it stands for, if redis-py's asyncio I/O met a connection closed
    under a command in flight (see ``_ASYNC_IO_MODULES``); else None."""
    if not isinstance(error, (AttributeError, TypeError)):
        return None
    trace, inside = error.__traceback__, False
    while trace is not None:
        code = trace.tb_frame.f_code
        path = code.co_filename.replace("\\", "/")
        if any(module in path for module in _ASYNC_IO_MODULES):
            inside = code.co_name in _ASYNC_IO_FUNCTIONS
        elif inside and _ASYNCIO not in path:
            inside = False  # deeper than redis-py's I/O, in code of neither redis-py nor asyncio
        trace = trace.tb_next
    if not inside:
        return None
    lost = redis.exceptions.ConnectionError(f"Connection closed under the command ({type(error).__name__}: {error})")
    lost.__cause__ = error
    return lost


def is_outage(error: BaseException) -> bool:
    """True when ``error`` says Redis cannot serve now (the policy applies), False for a bug."""
    if isinstance(error, (BackendUnavailable, *OUTAGE_ERRORS)):
        return True
    return isinstance(error, redis.exceptions.ResponseError) and _refusal(str(error))


@contextmanager
def outages_ignored() -> Iterator[None]:
    """For best-effort writes (the partition registry): an outage is dropped, a bug still raises."""
    try:
        yield
    except redis.exceptions.RedisError as exc:
        if not is_outage(exc):
            raise


def is_refusal(error: BaseException) -> bool:
    """An outage where Redis answered, but refused (as opposed to not answering at all)."""
    cause = _redis_error(error)
    return isinstance(cause, redis.exceptions.ResponseError) and is_outage(cause)


def is_acl_refusal(error: BaseException) -> bool:
    """A refusal by the user's ACL (a command or a key it is denied), not by the server's state (OOM, READONLY)."""
    cause = _redis_error(error)
    if isinstance(cause, redis.exceptions.NoPermissionError):
        return True
    if not isinstance(cause, redis.exceptions.ResponseError):
        return False
    lowered = _reply(str(cause)).lower()
    return "noperm" in lowered or any(phrase in lowered for phrase in ACL_PHRASES)


def misconfigured(error: BaseException) -> ConnectionMisconfigured | None:
    """The ``ConnectionMisconfigured`` behind ``error`` (a ``BackendUnavailable``'s cause, or itself), else None."""
    cause = _redis_error(error)
    return cause if isinstance(cause, ConnectionMisconfigured) else None


def reason(error: BaseException) -> str:
    """What Redis said, for an operator: the reply with the code redis-py strips put back."""
    cause = _redis_error(error)
    text = str(cause)
    for kind, code in _STRIPPED_CODES:
        if isinstance(cause, kind) and not _reply(text).startswith(code):
            return f"{code} {_reply(text)}"
    return _unwrapped(_reply(text)) if isinstance(cause, redis.exceptions.ResponseError) else text


def _redis_error(error: BaseException) -> BaseException:
    """The Redis error behind a ``BackendUnavailable``, or ``error`` itself."""
    cause = error.__cause__
    return cause if isinstance(error, BackendUnavailable) and isinstance(cause, redis.exceptions.RedisError) else error


def _reply(message: str) -> str:
    """The server's reply inside redis-py's pipeline note (asyncio quotes it as a tuple)."""
    stripped = _PIPELINE_NOTE.sub("", message, count=1)
    return stripped.removeprefix("('").removeprefix('("') if stripped != message else message


def _unwrapped(reply: str) -> str:
    """What a script's command was told, without the "Error running script" frame of Redis before 7."""
    return _SCRIPT_FRAME.sub("", reply, count=1)


def _refusal(message: str) -> bool:
    reply = _reply(message)
    wrapped = reply.startswith("Error running script")
    # Redis < 7: "Error running script (call to f_...): @user_script:1: -OOM command not allowed ..."
    codes = set(_WRAPPED_CODE.findall(reply)) if wrapped else {reply.split(" ", 1)[0]}
    lowered = reply.lower()
    return bool(codes & REFUSAL_CODES) or any(phrase in lowered for phrase in REFUSAL_PHRASES)
