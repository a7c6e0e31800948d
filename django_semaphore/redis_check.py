"""E015: Redis answers, and accepts a scripted write, through ``SEMAPHORE_CONNECTION``.

Registered as a deployment check: Django runs every other check before
``migrate``, ``makemigrations``, ``runserver`` and the tests, and those must
work on a laptop with no Redis running. So it runs on ``manage.py check
--deploy``, and alone with ``manage.py check --deploy --tag django_semaphore_redis``.

It writes one key, ``<SEMAPHORE_KEY_PREFIX>deploy-check`` (outside every
semaphore's hash tag, gone after a second), from a script: a PING alone
passes on a read-only replica, a full ``noeviction`` server or an ACL that
forbids scripts, each of which refuses every acquire.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import urlsplit, urlunsplit

import redis
from django.core.checks import CheckMessage, Error, register

from .checks import APP, check_app_settings, check_connection
from .core.conf import app_setting
from .core.connection import get_client
from .core.errors import is_refusal, reason

REDIS_TAG = "django_semaphore_redis"
PROBE_KEY = "deploy-check"
PROBE_SCRIPT = "return redis.call('SET', KEYS[1], ARGV[1], 'PX', 1000)"


@register(APP, REDIS_TAG, deploy=True)
def check_redis_reachable(app_configs: Any = None, **kwargs: Any) -> list[CheckMessage]:
    if any(message.is_serious() for message in (*check_connection(), *check_app_settings())):
        return []  # a wrong connection or prefix setting is reported by its own check
    try:
        get_client().eval(PROBE_SCRIPT, 1, f"{app_setting('SEMAPHORE_KEY_PREFIX')}{PROBE_KEY}", "1")
    except redis.RedisError as exc:
        what = "refused the probe" if is_refusal(exc) else "cannot be reached"
        return [
            Error(
                f"Redis {what} through SEMAPHORE_CONNECTION {_where()}: {reason(exc)}",
                hint="Start Redis, or fix the cache's LOCATION (or the URL or factory in SEMAPHORE_CONNECTION); "
                "a refusal names its cause (a read-only replica, a full server, an ACL).",
                id=f"{APP}.E015",
            )
        ]
    return []


def _where() -> str:
    """The connection setting as an operator knows it, never with the URL's password."""
    setting = app_setting("SEMAPHORE_CONNECTION")
    if not isinstance(setting, str):
        return f"({getattr(setting, '__qualname__', type(setting).__name__)})"
    if "://" not in setting:
        return repr(setting)
    url = urlsplit(setting)
    host = url.hostname or ""
    return repr(urlunsplit((url.scheme, f"{host}:{url.port}" if url.port else host, url.path, "", "")))
