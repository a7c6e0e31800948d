"""Which Redis errors are an outage (the failure policy applies) and which are bugs (they surface).

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

from ..exceptions import BackendUnavailable

# Always an outage, whatever the message: the server is unreachable, hung,
# loading, or refusing a whole class of commands.
OUTAGE_ERRORS: tuple[type[Exception], ...] = (
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
REFUSAL_PHRASES = (
    "attempted to access a non local key",
    "unknown command",
    "unknown subcommand",
    "user executing the script can't",
    "acl failure in script",
    "no permissions to",
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
