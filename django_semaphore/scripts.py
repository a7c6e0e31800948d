"""The Lua scripts, loaded once and run by SHA (reloaded on NOSCRIPT).

Each operation is one script and so one round trip; ``common.lua`` is
prepended to each so the helpers stay in one place without a second call.
redis-py's ``Script`` objects do the EVALSHA / SCRIPT LOAD dance, for the
sync, asyncio and cluster clients alike.
"""

from __future__ import annotations

import hashlib
from functools import cache
from importlib.resources import files
from typing import Any

from redis.cluster import ClusterPipeline
from redis.exceptions import NoScriptError


@cache
def source(name: str) -> str:
    """The full text of one script, helpers included."""
    folder = files("django_semaphore") / "lua"
    return (folder / "common.lua").read_text() + "\n" + (folder / f"{name}.lua").read_text()


_sync: dict[str, Any] = {}
_async: dict[str, Any] = {}


def run(client: Any, name: str, keys: list[str], args: list[Any]) -> Any:
    """Run script ``name`` on a sync client (or pipeline)."""
    if isinstance(client, ClusterPipeline):
        # redis-py refuses EVALSHA in a cluster pipeline (it cannot load a
        # missing script mid-pipeline): send the source, routed by its keys.
        return client.execute_command("EVAL", source(name), len(keys), *keys, *args)
    script = _sync.get(name)
    if script is None:
        script = _sync[name] = client.register_script(source(name))
    return script(keys=keys, args=args, client=client)


async def arun(client: Any, name: str, keys: list[str], args: list[Any]) -> Any:
    """Run script ``name`` on an asyncio client."""
    script = _async.get(name)
    if script is None:
        script = _async[name] = client.register_script(source(name))
    return await script(keys=keys, args=args, client=client)


@cache
def sha(name: str) -> str:
    return hashlib.sha1(source(name).encode()).hexdigest()


def _confirmed(replies: list[Any]) -> tuple[Any, int] | None:
    reply, acked = replies
    if isinstance(reply, NoScriptError):
        return None
    for value in (reply, acked):
        if isinstance(value, Exception):
            raise value
    return reply, int(acked)


def run_confirmed(client: Any, name: str, keys: list[str], args: list[Any], replicas: int, timeout_ms: int) -> Any:
    """Run a script and ``WAIT`` for replicas on the same connection, in one round trip.

    WAIT counts the replicas that have the writes of *its own* connection,
    so the two commands share one pipeline. Returns (reply, replicas that
    confirmed).
    """
    for _ in range(2):
        pipe = client.pipeline(transaction=False)
        pipe.evalsha(sha(name), len(keys), *keys, *args)
        pipe.execute_command("WAIT", replicas, timeout_ms)
        outcome = _confirmed(pipe.execute(raise_on_error=False))
        if outcome is not None:
            return outcome
        client.script_load(source(name))
    raise NoScriptError(f"Script {name!r} could not be loaded.")


async def arun_confirmed(
    client: Any, name: str, keys: list[str], args: list[Any], replicas: int, timeout_ms: int
) -> Any:
    """``run_confirmed`` on an asyncio client."""
    for _ in range(2):
        pipe = client.pipeline(transaction=False)
        pipe.evalsha(sha(name), len(keys), *keys, *args)
        pipe.execute_command("WAIT", replicas, timeout_ms)
        outcome = _confirmed(await pipe.execute(raise_on_error=False))
        if outcome is not None:
            return outcome
        await client.script_load(source(name))
    raise NoScriptError(f"Script {name!r} could not be loaded.")
