"""What this app left on a server: its Functions libraries, their versions, and who still uses them.

Each version's Lua is one library, named after a digest of its source (see
``scripts.py``); a server keeps every library ever loaded until someone
deletes it. Each process that runs a library refreshes its heartbeat key
(``django_semaphore:library:<name>``, alive ``HEARTBEAT_TTL`` seconds), so
a library without one is used by no running process: deleting it is safe,
and a process that still wanted it would load it again (or run EVALSHA) on
its next call. The script cache (EVALSHA mode) is never flushed: other
applications' scripts live there too.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from redis.exceptions import ResponseError

from ..core import scripts
from ..core.clients import SyncClient

_VERSION = re.compile(r"^-- django-semaphore (\S+)$", re.M)


@dataclass(frozen=True)
class Library:
    """One library on the server, as ``semaphore_scripts --list`` shows it."""

    name: str
    version: str | None  # the django-semaphore version that loaded it (None: a version before 0.2)
    masters: int  # how many masters have it (1 outside a Cluster)
    current: bool  # this code's own
    last_seen_s: float | None  # seconds since a process last used it; None: no process within HEARTBEAT_TTL

    @property
    def in_use(self) -> bool:
        return self.current or self.last_seen_s is not None


def inventory(client: SyncClient) -> list[Library]:
    """Every library of this app on the server (``ResponseError`` if it has no Functions for this user)."""
    listed = client.function_list(library=scripts.LIBRARY_PREFIX + "*", withcode=True)
    found: dict[str, tuple[str | None, int]] = {}
    for reply in scripts.per_master(listed):
        for entry in reply or []:
            fields = scripts.entry_fields(entry)
            name = fields.get("library_name")
            if not isinstance(name, str):
                continue
            match = _VERSION.search(str(fields.get("library_code", "")))
            version = match.group(1) if match else None
            found[name] = (version or found.get(name, (None, 0))[0], found.get(name, (None, 0))[1] + 1)
    names = sorted(found)
    pipe = client.pipeline(transaction=False)
    for name in names:
        pipe.pttl(scripts.heartbeat_key(name))
    ttls = pipe.execute() if names else []
    own = scripts.library()[0]
    return [
        Library(
            name=name,
            version=found[name][0],
            masters=found[name][1],
            current=name == own,
            last_seen_s=max(scripts.HEARTBEAT_TTL - ttl / 1000, 0.0) if ttl and ttl > 0 else None,
        )
        for name, ttl in zip(names, ttls, strict=True)
    ]


def load(client: SyncClient) -> str:
    """Load this version's library (every master of a Cluster) and mark it used, so a clean-up keeps it."""
    scripts.load(client)
    beat(client)
    return scripts.library()[0]


def beat(client: SyncClient) -> None:
    # Unannotated in redis-py; mypy's untyped_calls_exclude does not reach a method called on a union.
    client.execute_command(*scripts.heartbeat())  # type: ignore[no-untyped-call]


def load_scripts(client: SyncClient) -> int:
    """Put this version's scripts in the script cache (for EVALSHA); how many there are."""
    for operation in scripts.OPERATIONS:
        client.script_load(scripts.script(operation).source)
    beat(client)
    return len(scripts.OPERATIONS)


def cached_scripts(client: SyncClient) -> int:
    """How many of this version's scripts the script cache holds (on every master of a Cluster)."""
    shas = [scripts.script(operation).sha for operation in scripts.OPERATIONS]
    return sum(bool(found) for found in client.script_exists(*shas))


def delete(client: SyncClient, library: Library) -> None:
    """Remove ``library`` (from every master of a Cluster); one already gone is no error."""
    try:
        client.function_delete(library.name)
    except ResponseError as error:
        if "library not found" not in str(error).lower():
            raise
