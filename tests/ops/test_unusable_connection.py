"""A connection setting redis-py cannot make a connection from: E015, and the failure policy everywhere else.

The docs' TLS example with ``redis://`` instead of ``rediss://`` is the
common case: redis-py builds the client without complaint and refuses the
options only when it opens the first connection (``TypeError:
AbstractConnection.__init__() got an unexpected keyword argument
'ssl_ca_certs'``). Each way the engine builds a client is driven through its
real entry point: ``manage.py check --deploy``, sync and async views (the
decorator and the middleware), an async view whose own asyncio factory works
while the sync client (the renewal thread's) cannot be built, the background
thread's metrics batches, the management commands, the dashboard and the
metrics endpoint. None may answer 500 or print a traceback; guarded work
follows ``on_error``.
"""

from __future__ import annotations

import asyncio
import logging
import os
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest
import redis
import redis.asyncio
from django.core.management import CommandError, call_command
from django.core.management.base import SystemCheckError
from django.test import AsyncClient, Client

from django_semaphore import get_semaphore
from django_semaphore.core.renewal import renewer
from django_semaphore.core.tally import ERROR, tally
from django_semaphore.testing import RedisServer

from ..support.dashboard import staff, url
from ..support.guards import MIDDLEWARE, declare
from ..support.tls_on_redis_settings import TLS_OPTIONS

ROOT = Path(__file__).resolve().parents[2]
TIMEOUTS = {"SOCKET_CONNECT_TIMEOUT": 0.5, "SOCKET_TIMEOUT": 1}
TOKEN = "a-scraper-token-of-32-characters!"


def _django_redis(settings: Any, location: str) -> None:
    settings.CACHES = {
        **settings.CACHES,
        "semaphores": {
            "BACKEND": "django_redis.cache.RedisCache",
            "LOCATION": location,
            "OPTIONS": {**TIMEOUTS, "CONNECTION_POOL_KWARGS": TLS_OPTIONS},
        },
    }
    settings.SEMAPHORE_CONNECTION = "semaphores"


def _built_in(settings: Any, location: str) -> None:
    settings.CACHES = {
        **settings.CACHES,
        "semaphores": {
            "BACKEND": "django.core.cache.backends.redis.RedisCache",
            "LOCATION": location,
            "OPTIONS": {"socket_connect_timeout": 0.5, "socket_timeout": 1, **TLS_OPTIONS},
        },
    }
    settings.SEMAPHORE_CONNECTION = "semaphores"


def _url(settings: Any, location: str) -> None:
    settings.SEMAPHORE_CONNECTION = (
        f"{location}?socket_timeout=1&socket_connect_timeout=0.5&ssl_cert_reqs=required"
        f"&ssl_ca_certs={TLS_OPTIONS['ssl_ca_certs']}"
    )


BROKEN = {"django-redis": _django_redis, "built-in": _built_in, "url": _url}


def _location(server: RedisServer) -> str:
    """The session's (plain) server, in a database of its own: django-redis shares one pool among the caches
    of one LOCATION, and the other tests' cache must not get this one's options."""
    return f"{server.url.rsplit('/', 1)[0]}/15"


@pytest.fixture(params=sorted(BROKEN))
def broken(request: pytest.FixtureRequest, settings: Any, redis_server: RedisServer) -> str:
    """TLS options on a ``redis://`` location of the session's server, as a cache alias or a URL."""
    BROKEN[request.param](settings, _location(redis_server))
    return str(request.param)


@pytest.fixture
def cache_alias(settings: Any, redis_server: RedisServer) -> None:
    """The one way of the three the tests that need no variety use: the docs' CACHES entry, mistyped."""
    _django_redis(settings, _location(redis_server))


# -- manage.py check --deploy ------------------------------------------------------------------


def test_check_deploy_is_e015_naming_the_option_never_a_type_error(broken: str) -> None:
    with pytest.raises(SystemCheckError) as raised:
        call_command("check", deploy=True)
    text = str(raised.value)
    assert "django_semaphore.E015" in text and "cannot make a Redis connection" in text
    assert "ssl_c" in text and "rediss://" in text  # the option redis-py refused, and how to fix it
    assert "private-ca" not in text or broken != "url"  # a URL's query is not echoed


def test_manage_py_check_deploy_from_a_shell_exits_1_with_e015_and_no_traceback(redis_server: RedisServer) -> None:
    env = {
        **os.environ,
        "REDIS_URL": redis_server.url,
        "DJANGO_SETTINGS_MODULE": "tests.support.tls_on_redis_settings",
    }
    done = subprocess.run(
        [sys.executable, "-m", "django", "check", "--deploy"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 1, done.stderr
    assert "django_semaphore.E015" in done.stderr and "ssl_ca_certs" in done.stderr
    assert "Traceback" not in done.stderr


# -- guarded requests: the failure policy, sync and async ----------------------------------------


def _requests(settings: Any) -> dict[str, tuple[int, str | None]]:
    """Each way of guarding a request (the decorator and the middleware, sync and async): its status and outcome."""

    def answer(response: Any) -> tuple[int, str | None]:
        return response.status_code, response.json()["outcome"] if response.status_code == 200 else None

    answers = {"decorator": answer(Client().get("/surface/reported/"))}

    async def decorated_async() -> Any:
        return await AsyncClient().get("/surface/reported-async/")

    answers["decorator-async"] = answer(asyncio.run(decorated_async()))
    settings.MIDDLEWARE = [*settings.MIDDLEWARE, MIDDLEWARE]
    settings.SEMAPHORE_MIDDLEWARE_RULES = [{"semaphore": "guarded", "path": r"^/surface/unguarded"}]
    answers["middleware"] = answer(Client().get("/surface/unguarded/"))  # a new client loads the middleware

    async def middleware_async() -> Any:
        return await AsyncClient().get("/surface/unguarded-async/")

    answers["middleware-async"] = answer(asyncio.run(middleware_async()))
    return answers


@pytest.mark.parametrize(
    ("policy", "answer"), [(None, (200, "error_allowed")), ("allow", (200, "error_allowed")), ("deny", (503, None))]
)
def test_guarded_requests_follow_the_policy_never_a_500(
    broken: str, settings: Any, caplog: pytest.LogCaptureFixture, policy: str | None, answer: tuple[int, str | None]
) -> None:
    """The default policy is "allow" (docs/guides/failure-policy.md): the request runs unguarded, and says so."""
    declare(settings, guarded={} if policy is None else {"on_error": policy})
    with caplog.at_level(logging.WARNING, logger="django_semaphore.outages"):
        answers = _requests(settings)
    assert answers == dict.fromkeys(answers, answer)
    assert "cannot make a Redis connection" in caplog.text  # the outage log says why


def test_a_misconfiguration_is_logged_once_at_error_naming_the_setting_and_what_it_costs(
    broken: str, settings: Any, caplog: pytest.LogCaptureFixture
) -> None:
    """Not an outage that ends by itself: under "allow" every guarded request runs unguarded until someone
    fixes the setting, so it is said once, at ERROR, where an operator's alerting looks (not each request)."""
    declare(settings)
    with caplog.at_level(logging.WARNING, logger="django_semaphore"):
        _requests(settings)
        _requests(settings)  # sync, async, the decorator and the middleware, twice
    errors = [record for record in caplog.records if record.levelno >= logging.ERROR]
    assert len(errors) == 1, [record.getMessage() for record in errors]
    (said,) = errors
    assert said.name == "django_semaphore.settings" and said.exc_info is None
    message = said.getMessage()
    assert "SEMAPHORE_CONNECTION 'semaphores'" in message or "SEMAPHORE_CONNECTION 'redis://" in message
    assert "ssl_c" in message and "rediss://" in message  # the option redis-py refused, and the fix
    assert "unguarded" in message and "E015" in message  # what it costs until fixed, and where it is caught
    assert "private-ca" not in message or broken != "url"  # a URL's query is not echoed


class Switching:
    """A factory whose clients come from a sound pool, or (``unusable``) from one of ``broken``'s kinds."""

    def __init__(self, location: str, broken: str) -> None:
        self.unusable = False
        self.broken = broken
        self.sound = redis.Redis.from_url(location, socket_timeout=1, socket_connect_timeout=0.5)
        self.other = redis.Redis.from_url(location, socket_timeout=1, socket_connect_timeout=0.5, **TLS_OPTIONS)

    def __call__(self) -> redis.Redis:
        if not self.unusable:
            return self.sound
        if self.broken == "raises":
            raise RuntimeError("the secret store did not answer")  # a factory that fails now and then
        return self.other


@pytest.mark.parametrize("broken", ["raises", "another pool"])
def test_a_factory_unusable_now_and_then_is_the_policy_each_time_never_a_500(
    settings: Any, redis_server: RedisServer, broken: str
) -> None:
    """Each new pool is looked at, whichever pool was sound last (the per-call fast path is by pool)."""
    factory = Switching(_location(redis_server), broken)
    settings.SEMAPHORE_CONNECTION = factory
    declare(settings, guarded={"on_error": "deny"})
    statuses = []
    for unusable in (False, True, False, True, False):
        factory.unusable = unusable
        statuses.append(Client().get("/surface/reported/").status_code)
    assert statuses == [200, 503, 200, 503, 200]
    assert get_semaphore("guarded").status().used == 0


def working_async_client() -> redis.asyncio.Redis:
    """SEMAPHORE_ASYNC_CONNECTION's factory: the session's server, which the sync setting cannot reach."""
    return redis.asyncio.Redis.from_url(os.environ["REDIS_URL"], socket_timeout=1, socket_connect_timeout=0.5)


@pytest.mark.usefixtures("cache_alias")
def test_an_async_view_whose_own_client_works_still_needs_the_renewal_threads(
    settings: Any, redis_client: redis.Redis
) -> None:
    """Its permit is renewed by the background thread, on the sync client: one that cannot be built is the
    policy before any permit is taken, not a permit nobody can renew."""
    settings.SEMAPHORE_ASYNC_CONNECTION = f"{__name__}.working_async_client"
    declare(settings, guarded={"on_error": "deny"})

    async def request() -> int:
        return (await AsyncClient().get("/surface/reported-async/")).status_code

    assert asyncio.run(request()) == 503
    assert redis_client.zcard(get_semaphore("guarded").keys.holders) == 0  # nothing granted, nothing pinned


# -- the background thread ----------------------------------------------------------------------


@pytest.mark.usefixtures("cache_alias")
def test_the_background_threads_metrics_batches_meet_an_outage_not_a_bug(
    settings: Any, caplog: pytest.LogCaptureFixture
) -> None:
    """The thread writes the counts of the failed attempts; it cannot, and keeps them, with no traceback."""
    settings.SEMAPHORE_METRICS_FLUSH_INTERVAL = 0.1
    tally.flush()  # nothing to write (a new connection setting drops the counts): the next count schedules one
    declare(settings)
    with caplog.at_level(logging.ERROR, logger="django_semaphore"):
        assert Client().get("/surface/reported/").status_code == 200
        flushed = threading.Event()
        # The thread runs its jobs in time order: once this one has run, so has the metrics' batch before it.
        renewer.run_at("test: after the metrics batch", time.monotonic() + 0.5, flushed.set)
        assert flushed.wait(10)
    # Nothing but the misconfiguration's own line (said once, where the request met it): no bug, no traceback.
    said = [record for record in caplog.records if record.levelno >= logging.ERROR]
    assert [(record.name, record.exc_info) for record in said] == [("django_semaphore.settings", None)]
    assert any(key[:2] == ("guarded", ERROR) for key in tally.pending()["attempts"])  # kept for a later batch


# -- the operators' faces -----------------------------------------------------------------------


@pytest.mark.usefixtures("cache_alias")
@pytest.mark.parametrize(
    "command",
    [
        ["semaphore_status"],
        ["semaphore_release", "reports", "--all", "--noinput"],
        ["semaphore_release", "reports", "--expired"],
        ["semaphore_limit", "reports", "4"],
        ["semaphore_scripts", "--list"],
    ],
    ids=lambda command: " ".join(command),
)
def test_commands_say_it_in_one_line_with_exit_status_1(command: list[str]) -> None:
    with pytest.raises(CommandError, match=r"^The Redis connection is misconfigured: .*ssl_ca_certs") as raised:
        call_command(*command)
    assert raised.value.returncode == 1


def test_a_command_from_a_shell_prints_one_line_and_no_traceback(redis_server: RedisServer) -> None:
    env = {
        **os.environ,
        "REDIS_URL": redis_server.url,
        "DJANGO_SETTINGS_MODULE": "tests.support.tls_on_redis_settings",
    }
    done = subprocess.run(
        [sys.executable, "-m", "django", "semaphore_status"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 1
    assert done.stderr.strip().startswith("CommandError: The Redis connection is misconfigured")
    assert "Traceback" not in done.stderr and len(done.stderr.strip().splitlines()) == 1


@pytest.mark.django_db
@pytest.mark.usefixtures("cache_alias")
def test_the_dashboard_says_the_connection_is_misconfigured(client: Client) -> None:
    client.force_login(staff("operator", "view_semaphore_dashboard", "release_semaphore_permit"))
    page = client.get(url("changelist"))
    assert page.status_code == 503
    assert "The Redis connection is misconfigured" in page.content.decode()
    assert "ssl_ca_certs" in page.content.decode()
    assert client.get(url("json")).status_code == 503
    assert client.get(url("detail", "reports")).status_code == 503
    assert "misconfigured" in client.get(url("detail_json", "reports")).json()["error"]


@pytest.mark.usefixtures("cache_alias")
def test_the_metrics_endpoint_is_a_503_not_a_500(settings: Any) -> None:
    settings.SEMAPHORE_METRICS_TOKEN = TOKEN
    response = Client().get("/metrics/", headers={"Authorization": f"Bearer {TOKEN}"})
    assert response.status_code == 503
    assert "cannot make a Redis connection" in response.content.decode()
