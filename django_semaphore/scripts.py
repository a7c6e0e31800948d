"""The Lua scripts, loaded once and run by SHA (reloaded on NOSCRIPT).

Each operation is one script and so one round trip; ``common.lua`` is
prepended to each so the helpers stay in one place without a second call.
redis-py's ``Script`` objects do the EVALSHA / SCRIPT LOAD dance, for the
sync, asyncio and cluster clients alike.
"""

from __future__ import annotations

from functools import cache
from importlib.resources import files
from typing import Any

NAMES = ("acquire", "release", "renew", "cancel", "status", "force_release", "set_limit")


@cache
def source(name: str) -> str:
    """The full text of one script, helpers included."""
    folder = files("django_semaphore") / "lua"
    return (folder / "common.lua").read_text() + "\n" + (folder / f"{name}.lua").read_text()


_sync: dict[str, Any] = {}
_async: dict[str, Any] = {}


def run(client: Any, name: str, keys: list[str], args: list[Any]) -> Any:
    """Run script ``name`` on a sync client (or pipeline)."""
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
