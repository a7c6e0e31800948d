"""The Lua operations, as one Redis Functions library loaded once and called with FCALL.

``lua/common.lua`` and ``lua/adaptive.lua`` start the library; each other file is the body of one
operation, registered as ``<library>_<operation>``. The library's name
carries a digest of its source, so processes of two versions of this app (a
rolling deploy) each call their own functions, and a server that lost its
functions (a restart without persistence, ``FUNCTION FLUSH``, a new Cluster
node) gets them again on the first call that finds them missing.

Loaded once, the helpers are defined once rather than on every call (a
script run with EVALSHA defines them all each time), which is most of what a
script costs the server on the common path. Needs Redis 7.0 or Valkey 7.2.
"""

from __future__ import annotations

import hashlib
from functools import cache
from importlib.resources import files
from typing import Any

from redis.exceptions import ResponseError

from .calls import ScriptCall

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
)


# The helpers every operation shares, in this order (adaptive.lua uses common.lua's).
PRELUDE = ("common", "adaptive")


def _text(name: str) -> str:
    return (files("django_semaphore.core") / "lua" / f"{name}.lua").read_text()


@cache
def library() -> tuple[str, str]:
    """The library's name and source."""
    prelude = "".join(_text(name) for name in PRELUDE)
    body = prelude + "".join(_text(name) for name in OPERATIONS)
    name = "django_semaphore_" + hashlib.sha1(body.encode()).hexdigest()[:12]
    parts = [f"#!lua name={name}\n", prelude]
    for operation in OPERATIONS:
        parts.append(f"\nlocal function {operation}_operation(keys, args)\n  begin(keys, args)\n")
        parts.append(_text(operation))
        parts.append(f"\nend\nredis.register_function('{name}_{operation}', {operation}_operation)\n")
    return name, "".join(parts)


def function(operation: str) -> str:
    """The name the library registers ``operation`` under."""
    return f"{library()[0]}_{operation}"


def fcall_args(call: ScriptCall) -> tuple[Any, ...]:
    """The command that runs ``call``."""
    return ("FCALL", function(call.script), len(call.keys), *call.keys, *call.args)


def load_args() -> tuple[Any, ...]:
    """The command that loads the library (what ``load`` sends)."""
    return ("FUNCTION", "LOAD", "REPLACE", library()[1])


def missing(error: BaseException) -> bool:
    """The server does not have the library (yet, or any more)."""
    return isinstance(error, ResponseError) and "Function not found" in str(error)


def load(client: Any) -> None:
    """Load the library (on every master of a Cluster: redis-py sends FUNCTION LOAD to all)."""
    client.function_load(library()[1], replace=True)


async def aload(client: Any) -> None:
    await client.function_load(library()[1], replace=True)


def run(client: Any, call: ScriptCall) -> Any:
    """Run one operation on a sync client."""
    try:
        return client.execute_command(*fcall_args(call))
    except ResponseError as error:
        if not missing(error):
            raise
    load(client)
    return client.execute_command(*fcall_args(call))


async def arun(client: Any, call: ScriptCall) -> Any:
    """Run one operation on an asyncio client."""
    try:
        return await client.execute_command(*fcall_args(call))
    except ResponseError as error:
        if not missing(error):
            raise
    await aload(client)
    return await client.execute_command(*fcall_args(call))


def run_pipeline(client: Any, calls: list[ScriptCall]) -> list[Any]:
    """Run several operations in one round trip (a dashboard's partitions); errors come back as values."""
    for attempt in range(2):
        pipe = client.pipeline(transaction=False)
        for call in calls:
            pipe.execute_command(*fcall_args(call))
        replies = pipe.execute(raise_on_error=False)
        if attempt == 0 and any(missing(reply) for reply in replies):
            load(client)
            continue
        return list(replies)
    raise AssertionError("unreachable")


async def arun_pipeline(client: Any, calls: list[ScriptCall]) -> list[Any]:
    """``run_pipeline`` on an asyncio client."""
    for attempt in range(2):
        pipe = client.pipeline(transaction=False)
        for call in calls:
            pipe.execute_command(*fcall_args(call))
        replies = await pipe.execute(raise_on_error=False)
        if attempt == 0 and any(missing(reply) for reply in replies):
            await aload(client)
            continue
        return list(replies)
    raise AssertionError("unreachable")


def confirmed(replies: list[Any]) -> tuple[Any, int] | None:
    """A script's reply and WAIT's count, from their two replies; None when the library must be loaded first."""
    reply, acked = replies
    if missing(reply):
        return None
    for value in (reply, acked):
        if isinstance(value, Exception):
            raise value
    return reply, int(acked)


def run_confirmed(client: Any, call: ScriptCall, replicas: int, timeout_ms: int) -> Any:
    """Run an operation and ``WAIT`` for replicas on the same connection, in one round trip.

    WAIT counts the replicas that have the writes of *its own* connection,
    so the two commands share one pipeline. Returns (reply, replicas that
    confirmed).
    """
    for _ in range(2):
        pipe = client.pipeline(transaction=False)
        pipe.execute_command(*fcall_args(call))
        pipe.execute_command("WAIT", replicas, timeout_ms)
        outcome = confirmed(pipe.execute(raise_on_error=False))
        if outcome is not None:
            return outcome
        load(client)
    raise ResponseError(f"Function {function(call.script)!r} could not be loaded.")


async def arun_confirmed(client: Any, call: ScriptCall, replicas: int, timeout_ms: int) -> Any:
    """``run_confirmed`` on an asyncio client."""
    for _ in range(2):
        pipe = client.pipeline(transaction=False)
        pipe.execute_command(*fcall_args(call))
        pipe.execute_command("WAIT", replicas, timeout_ms)
        outcome = confirmed(await pipe.execute(raise_on_error=False))
        if outcome is not None:
            return outcome
        await aload(client)
    raise ResponseError(f"Function {function(call.script)!r} could not be loaded.")
