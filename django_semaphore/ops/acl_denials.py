"""What an ACL denies the connection's user, said as the line that grants it (E015, W010).

Redis 6.2 and 7.0 refuse a command a script runs without naming it ("The
user executing the script can't run this command or subcommand"). ``ACL
LOG`` and ``ACL DRYRUN`` name it, but an application's user may run
neither. The ACL judges a command a script runs and the same command sent
on its own alike, so ``denied`` sends each command the scripts run on its
own, in a form that changes nothing: on a key of the deploy check's own
that does not exist, or, for the commands that would create one, on a key
holding a string that expires in seconds, which Redis answers with
WRONGTYPE once its ACL has let the command through. NOPERM is the ACL's
answer; any other reply is not.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from contextlib import suppress
from dataclasses import dataclass
from typing import Any

from redis.exceptions import NoPermissionError, RedisError, ResponseError

from ..core.clients import SyncClient

MISSING, STRING = "<missing>", "<string>"
# The string key lives this long (ms) should the user be denied DEL too.
STRING_MS = 5000
# Each command the Lua files run (tests/ops/test_acl_lines.py keeps the list in step with them), in a form
# that changes nothing, as redis-cli would take it: <missing> stands for a key that does not exist, <string>
# for one that holds a string. Named by the command, lower case.
HARMLESS: dict[str, tuple[str, ...]] = {
    form.split()[0].lower(): tuple(form.split())
    for form in (
        "DEL <missing>",
        "EXISTS <missing>",
        "GET <missing>",
        "HDEL <missing> f",
        "HEXISTS <missing> f",
        "HGET <missing> f",
        "HINCRBY <string> f 0",
        "HMGET <missing> f",
        "HSET <string> f v",
        "HSETNX <string> f v",
        "LRANGE <missing> 0 0",
        "LTRIM <missing> 0 -1",
        "PEXPIRE <missing> 1",
        "PEXPIREAT <missing> 1",
        "RPUSH <string> v",
        f"SET <string> x PX {STRING_MS}",  # as the string was set: it still lapses
        "TIME",
        "ZADD <string> 0 m",
        "ZCARD <missing>",
        "ZCOUNT <missing> 0 0",
        "ZRANGE <missing> 0 0",
        "ZRANGEBYSCORE <missing> 0 0",
        "ZRANK <missing> m",
        "ZREM <missing> m",
        "ZREMRANGEBYSCORE <missing> 0 0",
        "ZSCAN <missing> 0",
        "ZSCORE <missing> m",
    )
}
# "... no permissions to run the 'time' command": a top-level refusal, or a script's on Redis 7.2+ and Valkey.
_NAMED = re.compile(r"permissions to run the '([a-z|_-]+)' command")
_PLAIN_NAME = re.compile(r"^[\w.@:-]+$")


@dataclass(frozen=True)
class Denials:
    """The commands (lower case, sorted) and whether the keys an ACL denies the user."""

    commands: tuple[str, ...] = ()
    keys: bool = False

    def __bool__(self) -> bool:
        return bool(self.commands or self.keys)

    def said(self, prefix: str) -> str:
        """The sentence naming them: "The ACL denies this user TIME."."""
        parts = [", ".join(command.upper() for command in self.commands)] if self.commands else []
        if self.keys:
            parts.append(f"the keys under {prefix!r}")
        return f"The ACL denies this user {' and '.join(parts)}."

    def grant(self, user: str, prefix: str) -> str:
        """The line that grants them: ``ACL SETUSER <user> ~<prefix>* +time``."""
        rules = ([f"~{prefix}*"] if self.keys else []) + [f"+{command}" for command in self.commands]
        return f"ACL SETUSER {acl_name(user)} {' '.join(rules)}"


def denied(client: SyncClient, reply: str, missing: str, string: str) -> Denials:
    """What the ACL denies the user of ``client``: named in ``reply``, and found by sending each command the
    scripts run on its own (``missing`` a key that does not exist, ``string`` one free to be set for a moment;
    both in the probe's hash tag and under the key prefix)."""
    commands = set(_NAMED.findall(reply.lower()))
    keys = _about_keys(reply)
    forms = list(HARMLESS.items())
    try:
        _send(client, ["SET", string, "x", "PX", STRING_MS])
    except ResponseError as exc:  # no string to try them on: the commands that would create a key are left out
        keys = keys or _about_keys(str(exc))
        forms = [(name, form) for name, form in forms if STRING not in form]
    except RedisError:
        return Denials(tuple(sorted(commands)), keys)
    try:
        keys_of = {MISSING: missing, STRING: string}
        for name, form in forms:
            refusal = _refusal(client, [keys_of.get(arg, arg) for arg in form])
            if refusal is not None and _about_keys(refusal):
                keys = True
            elif refusal is not None:
                commands.add(name)
    except RedisError:
        pass  # the server went away meanwhile: what was found so far
    finally:
        with suppress(RedisError):
            _send(client, ["DEL", string])
    return Denials(tuple(sorted(commands)), keys)


def _send(client: SyncClient, command: Iterable[Any]) -> None:
    client.execute_command(*command)  # type: ignore[no-untyped-call]


def _refusal(client: SyncClient, command: Iterable[Any]) -> str | None:
    """The ACL's refusal of ``command`` (its message), or None when the ACL let it through."""
    try:
        _send(client, command)
    except NoPermissionError as exc:
        return str(exc)
    except ResponseError:
        return None  # WRONGTYPE and the like: past the ACL
    return None


def _about_keys(message: str) -> bool:
    """A refusal of a key ("No permissions to access a key", "can't access at least one of the keys")."""
    lowered = message.lower()
    return "access" in lowered and "key" in lowered


def user_of(client: SyncClient) -> str:
    """The ACL user ``client`` connects as (``default`` when it names none)."""
    pool = getattr(client, "connection_pool", None)
    options = getattr(pool, "connection_kwargs", None)
    if options is None:  # a Cluster: every node's connections take the same options
        options = getattr(getattr(client, "nodes_manager", None), "connection_kwargs", None) or {}
    return str(options.get("username") or "default")


def acl_name(user: str) -> str:
    """``user`` as an ``ACL SETUSER`` line takes it: quoted when it holds more than letters, digits and ``_.@:-``."""
    return user if _PLAIN_NAME.match(user) else json.dumps(user)
