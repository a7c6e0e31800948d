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
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from typing import Any

import redis
from django.core.checks import CheckMessage, Error

from ..core.checks import APP, check_connection, check_engine_settings
from ..core.conf import SemaphoreConfig, app_setting
from ..core.connection import described
from ..core.errors import BackendUnavailable, is_refusal, misconfigured, reason
from ..core.semaphore import Semaphore
from ..core.tally import uncounted

REDIS_TAG = "django_semaphore_redis"
PROBE_NAME = "deploy-check"
# Short enough that the probe's keys are gone within seconds, long enough for the probe itself.
PROBE_SECONDS = 2.0
PROBE_WAIT = 0.05
ACL_HINT = (
    "An ACL refusal names the command: grant it to the connection's user (the docs' servers page has "
    "the least-privilege ACL line for each way the engine runs)."
)


def settings_sound() -> bool:
    """The engine's connection and settings pass their own checks: a wrong one is reported there, not here."""
    return not any(message.is_serious() for message in (*check_connection(), *check_engine_settings()))


def check_redis_reachable(app_configs: Any = None, **kwargs: Any) -> list[CheckMessage]:
    if not settings_sound():
        return []  # a wrong connection or prefix setting is reported by its own check
    step = "connect"
    probing = uncounted.set(True)
    try:
        for name, run in _steps():
            step = name
            run()
    except (BackendUnavailable, redis.RedisError) as exc:
        unusable = misconfigured(exc)
        if unusable is not None:
            return [_e015(f"{unusable.where} cannot make a Redis connection: {unusable.problem}", unusable.hint)]
        refused = is_refusal(exc)
        what = f"refused what the engine runs ({step})" if refused else "cannot be reached"
        return [
            _e015(
                f"Redis {what} through {_where()}: {reason(exc)}",
                ACL_HINT
                if refused
                else "Start Redis, or fix the cache's LOCATION (or the URL or factory in SEMAPHORE_CONNECTION).",
            )
        ]
    finally:
        uncounted.reset(probing)
    return []


def _steps() -> list[tuple[str, Callable[[], object]]]:
    """The engine's operations in the order a request meets them, each named for the report."""
    config = SemaphoreConfig(name=PROBE_NAME, limit=1, lease=PROBE_SECONDS, partition_idle=PROBE_SECONDS)
    # A partition of its own (two checks may run at once) whose keys expire; given by its hash, it is
    # not written to the name's registry of partitions (kept for days), only read from it.
    sem = Semaphore(config, partition=uuid.uuid4().hex)
    held: list[Any] = []

    def acquire() -> None:
        held.append(sem.acquire(auto_renew=False))

    return [
        ("acquire", acquire),
        ("wait", lambda: sem.acquire(wait=PROBE_WAIT)),  # full: waits in line (BLPOP), then leaves it
        ("status", sem.status),
        ("list partitions", lambda: Semaphore(config).partitions(limit=1)),
        ("release", lambda: held[0].release()),
    ]


def _e015(msg: str, hint: str) -> Error:
    return Error(msg, hint=hint, id=f"{APP}.E015")


def _where() -> str:
    return described("SEMAPHORE_CONNECTION", app_setting("SEMAPHORE_CONNECTION"))
