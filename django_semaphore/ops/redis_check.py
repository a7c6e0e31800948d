"""E015: the engine's own operations work through ``SEMAPHORE_CONNECTION``.

Registered (by ``django_semaphore/checks.py``) as a deployment check: Django runs every other check before
``migrate``, ``makemigrations``, ``runserver`` and the tests, and those must
work on a laptop with no Redis running. So it runs on ``manage.py check
--deploy``, and alone with ``manage.py check --deploy --tag django_semaphore_redis``.

It runs what a guarded request runs, not a stand-in: a PING passes on a
read-only replica, a full ``noeviction`` server or an ACL that forbids the
commands inside the scripts (TIME, say), each of which refuses every
acquire. So it acquires a permit of a throw-away partition (loading the
Lua, as Functions or as scripts, whichever the server takes), waits in line
for it (BLPOP), reads its status and the registry of partitions, and
releases. Its keys, under ``<SEMAPHORE_KEY_PREFIX>{deploy-check:...}``,
expire within seconds; its calls are not counted in the metrics (whose
hash per name would outlive them), nor seen by their listeners.

A refusal says what to do about it: an ACL's names what the ACL denies
(found by ops/acl_denials.py where the server's reply does not say) and
the ``ACL SETUSER`` line that grants it; the server's state (OOM,
READONLY, MISCONF...) what to do about that, and nothing about ACLs.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable
from typing import Any

import redis
from django.core.checks import CheckMessage, Error

from ..core.checks import APP, check_connection, check_engine_settings
from ..core.conf import SemaphoreConfig, app_setting, key_prefix
from ..core.connection import described, get_client
from ..core.errors import BackendUnavailable, is_acl_refusal, is_refusal, misconfigured, reason
from ..core.semaphore import Semaphore
from ..core.tally import uncounted
from .acl_denials import HARMLESS, Denials, denied, user_of

REDIS_TAG = "django_semaphore_redis"
PROBE_NAME = "deploy-check"
# Short enough that the probe's keys are gone within seconds, long enough for the probe itself.
PROBE_SECONDS = 2.0
PROBE_WAIT = 0.05
PROBE_PATIENCE = 3.0
SCRIPT_COMMANDS = ", ".join(command.upper() for command in HARMLESS)
# What to do about a refusal that is the server's state, not an ACL, by its code.
STATE_HINTS = {
    "OOM": (
        "The server is full (maxmemory reached under noeviction): free memory or raise maxmemory, and give the "
        "semaphores a server of their own; see the docs, install.md (Where the permits live)."
    ),
    "READONLY": "SEMAPHORE_CONNECTION reaches a read-only replica: point it at the primary.",
    "MISCONF": "Redis stopped writes after a failed RDB save: fix its disk or its save settings (its log says which).",
    "BUSY": "A script has run past busy-reply-threshold: wait for it to end, or stop it (SCRIPT KILL).",
    "NOREPLICAS": "Fewer replicas than min-replicas-to-write are connected: bring them back, or lower the setting.",
}
STATE_HINT = "The reply says why the server refuses: fix that, then run this check again."
SERVERS_PAGE = "the docs' servers page has the least-privilege line for each way the engine runs"


def settings_sound() -> bool:
    """The engine's connection and settings pass their own checks: a wrong one is reported there, not here."""
    return not any(message.is_serious() for message in (*check_connection(), *check_engine_settings()))


def check_redis_reachable(app_configs: Any = None, **kwargs: Any) -> list[CheckMessage]:
    if not settings_sound():
        return []  # a wrong connection or prefix setting is reported by its own check
    config = SemaphoreConfig(name=PROBE_NAME, limit=1, lease=PROBE_SECONDS, partition_idle=PROBE_SECONDS)
    # A partition of its own (two checks may run at once) whose keys expire; given by its hash, it is
    # not written to the name's registry of partitions (kept for days), only read from it.
    sem = Semaphore(config, partition=uuid.uuid4().hex)
    step = "connect"
    probing = uncounted.set(True)
    try:
        for name, run in _steps(sem):
            step = name
            run()
    except (BackendUnavailable, redis.RedisError) as exc:
        return [_failed(exc, step, sem)]
    finally:
        uncounted.reset(probing)
    return []


def _failed(error: Exception, step: str, sem: Semaphore) -> Error:
    """E015 for what stopped ``step``: settings that make no connection, no answer, the server's state, an ACL."""
    unusable = misconfigured(error)
    if unusable is not None:
        return _e015(f"{unusable.where} cannot make a Redis connection: {unusable.problem}", unusable.hint)
    if not is_refusal(error):
        return _e015(
            f"Redis cannot be reached through {_where()}: {reason(error)}",
            "Start Redis, or fix the cache's LOCATION (or the URL or factory in SEMAPHORE_CONNECTION).",
        )
    said = f"Redis refused what the engine runs ({step}) through {_where()}: {reason(error)}"
    if not is_acl_refusal(error):
        return _e015(said, STATE_HINTS.get(reason(error).split(" ", 1)[0], STATE_HINT))
    try:
        client = get_client()
        denials = denied(client, reason(error), f"{sem.keys.base}acl:missing", f"{sem.keys.base}acl:string")
    except redis.RedisError:
        denials = Denials()
    if not denials:
        return _e015(
            said,
            f"Grant the connection's user what the engine runs ({SERVERS_PAGE}); the scripts run "
            f"{SCRIPT_COMMANDS}. An administrator's ACL LOG names the command refused.",
        )
    prefix = key_prefix()
    grant = denials.grant(user_of(client), prefix)
    return _e015(f"{said} {denials.said(prefix)}", f"Grant it: {grant} ({SERVERS_PAGE}).")


def _steps(sem: Semaphore) -> list[tuple[str, Callable[[], object]]]:
    """The engine's operations in the order a request meets them, each named for the report."""
    held: list[Any] = []

    def acquire() -> None:
        held.append(sem.acquire(auto_renew=False))

    def wait() -> None:  # full: waits in line (BLPOP), then leaves it
        # Asked again where it answered too late, for PROBE_PATIENCE: its bound is the wait and 0.2 s, which
        # opening the connection it waits on (a TLS handshake on a loaded machine) may outrun. Slow for a moment
        # is not unreachable, and E015 would send the operator after an outage that is not there; a server that
        # is down, refuses, or answers that late every time still fails.
        patience = time.monotonic() + PROBE_PATIENCE
        while True:
            try:
                sem.acquire(wait=PROBE_WAIT)
                return
            except BackendUnavailable as exc:
                if not isinstance(exc.__cause__, redis.exceptions.TimeoutError) or time.monotonic() > patience:
                    raise

    return [
        ("acquire", acquire),
        ("wait", wait),
        ("status", sem.status),
        ("list partitions", lambda: Semaphore(sem.config).partitions(limit=1)),
        ("release", lambda: held[0].release()),
    ]


def _e015(msg: str, hint: str) -> Error:
    return Error(msg, hint=hint, id=f"{APP}.E015")


def _where() -> str:
    return described("SEMAPHORE_CONNECTION", app_setting("SEMAPHORE_CONNECTION"))
