"""Make a real server refuse commands the way production servers do.

Each helper puts a server the test started itself into one refusing state
(memory full, persistence failing, a script hogging it, too few replicas,
an ACL change) and returns how to undo it, so a test can show recovery too.
"""

from __future__ import annotations

import shutil
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress

import redis

from django_semaphore.signals import semaphore_backend_error
from django_semaphore.testing import RedisServer

from .modes import known
from .servers import wait_for

Undo = Callable[[], None]
JUNK = b"x" * 1024
# Room above what the server uses at start: a few hundred of junk values.
HEADROOM = 512 * 1024


@contextmanager
def backend_errors() -> Iterator[list[BaseException]]:
    """The errors ``semaphore_backend_error`` reports meanwhile."""
    seen: list[BaseException] = []

    def note(sender: str, error: BaseException, **kwargs: object) -> None:
        seen.append(error)

    semaphore_backend_error.connect(note)
    try:
        yield seen
    finally:
        semaphore_backend_error.disconnect(note)


LIMITED_USER, LIMITED_PASSWORD = "limited", "limited-pw"


def fill_memory(client: redis.Redis) -> Undo:
    """Set a maxmemory a little above current use (``noeviction``), then write junk until writes fail.

    Memory use wobbles (buffers freed after a refused write), so it keeps
    writing until a run of writes in a row is refused, then sets the limit
    below what is used, where no wobble takes it back.
    """
    used = int(client.info("memory")["used_memory"])
    client.config_set("maxmemory-policy", "noeviction")
    client.config_set("maxmemory", used + HEADROOM)
    written, refused_in_a_row = 0, 0
    while refused_in_a_row < 20:
        try:
            client.set(f"junk:{written}", JUNK)
            written += 1
            refused_in_a_row = 0
        except redis.exceptions.OutOfMemoryError:
            refused_in_a_row += 1
    # Then below what is used: buffers freed after the refused writes could otherwise bring use back
    # under the limit, and the test's next write would be let through.
    client.config_set("maxmemory", int(client.info("memory")["used_memory"]) // 2)
    return lambda: client.config_set("maxmemory", 0)


def fail_persistence(server: RedisServer, client: redis.Redis) -> Undo:
    """MISCONF: save points are set and the last background save failed (its directory vanished)."""
    client.config_set("save", "3600 1")
    shutil.rmtree(server.data_dir)  # the server's working directory: the save cannot create its file
    client.bgsave()
    wait_for(lambda: client.info("persistence")["rdb_last_bgsave_status"] == "err", what="a failed BGSAVE")
    # Without save points the server stops refusing writes (the operator's quick fix).
    return lambda: client.config_set("save", "")


def hog_with_a_script(server: RedisServer) -> Undo:
    """BUSY: another client's script loops past the busy threshold (100 ms) until SCRIPT KILL."""
    control = redis.Redis.from_url(server.url)
    control.config_set("lua-time-limit", 100)
    hog = redis.Redis.from_url(server.url)

    def loop() -> None:
        with suppress(redis.exceptions.ResponseError):  # "Script killed by user": the undo
            hog.eval("while true do end", 0)

    thread = threading.Thread(target=loop, daemon=True)
    thread.start()
    wait_for(lambda: _busy(control), what="the server busy with a script")

    def undo() -> None:
        control.script_kill()
        thread.join(10)
        hog.close()
        control.close()

    return undo


def _busy(client: redis.Redis) -> bool:
    try:
        client.get("probe")
    except redis.exceptions.ResponseError as exc:
        return str(exc).startswith("BUSY")
    return False


def require_replicas(client: redis.Redis) -> Undo:
    """NOREPLICAS: writes need a replica that does not exist."""
    client.config_set("min-replicas-to-write", 1)
    return lambda: client.config_set("min-replicas-to-write", 0)


def revoke_scripts(client: redis.Redis) -> Undo:
    """NOPERM: the app connects as a user whose ACL no longer allows scripts.

    Returns the undo; the test connects as ``LIMITED_USER`` itself.
    """

    def allow(commands: list[str]) -> None:
        client.acl_setuser(
            LIMITED_USER, enabled=True, passwords=[f"+{LIMITED_PASSWORD}"], keys=["*"], commands=commands
        )

    scripting = known(client, "eval", "evalsha", "script", "fcall", "function")  # Redis 6 has no FCALL
    allow(["+@all", *(f"-{command}" for command in scripting)])
    return lambda: allow(["+@all"])
