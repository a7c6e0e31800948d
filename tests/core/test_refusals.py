"""Redis refusing commands (OOM, MISCONF, BUSY, NOREPLICAS, NOPERM) is an outage, not a bug.

Each refusal is produced for real on a server the test started itself (see
tests/support/refusals.py). The engine raises ``BackendUnavailable``, so the
decorator and the middleware follow ``on_error``, the dashboard answers its
503 page, and the commands exit with one line; a genuine bug (a script or a
command Redis rejects as wrong) still surfaces as the error it is.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterator
from io import StringIO

import pytest
import redis
from django.contrib.auth.models import User
from django.core.management import CommandError, call_command
from django.test import AsyncClient, Client
from django.urls import reverse

from django_semaphore import BackendUnavailable, get_semaphore, outcomes
from django_semaphore.core import errors
from django_semaphore.testing import RedisServer

from ..conftest import OWN_SERVER_TIMEOUTS
from ..support import refusals, shell
from ..support.guards import MIDDLEWARE, declare

DASHBOARD = "admin:django_semaphore_semaphoredashboard_"
ERROR_OUTCOME = {"allow": "error_allowed", "deny": "error_denied"}

Refusal = Callable[[RedisServer, redis.Redis], refusals.Undo]
REFUSALS: dict[str, Refusal] = {
    "OOM": lambda server, client: refusals.fill_memory(client),
    "MISCONF": refusals.fail_persistence,
    "BUSY": lambda server, client: refusals.hog_with_a_script(server),
    "NOREPLICAS": lambda server, client: refusals.require_replicas(client),
}


@pytest.fixture
def admin_client(own_server_client: redis.Redis) -> redis.Redis:
    """conftest's ``own_server_client`` (this name is pytest-django's elsewhere)."""
    return own_server_client


@pytest.fixture
def full(own_server: RedisServer, admin_client: redis.Redis) -> Iterator[None]:
    """The app's server with maxmemory reached under ``noeviction``: every write is refused with OOM."""
    undo = refusals.fill_memory(admin_client)
    yield
    undo()


@pytest.fixture
def backend_errors() -> Iterator[list[BaseException]]:
    with refusals.backend_errors() as seen:
        yield seen


# -- the engine -------------------------------------------------------------


@pytest.mark.parametrize("code", sorted(REFUSALS))
def test_each_refusal_raises_backend_unavailable_and_clears_with_its_cause(
    code: str, own_server: RedisServer, admin_client: redis.Redis, backend_errors: list[BaseException], settings
) -> None:
    # A refusal is answered at once: a roomy timeout keeps a starved machine's slow answer from
    # passing for a hung server (this test is about what the server says, not when).
    settings.SEMAPHORE_CONNECTION = f"{own_server.url}?socket_timeout=5&socket_connect_timeout=5"
    sem = get_semaphore("reports")
    assert sem.acquire(auto_renew=False) is not None
    undo = REFUSALS[code](own_server, admin_client)
    try:
        with pytest.raises(BackendUnavailable, match=code) as caught:
            sem.acquire(auto_renew=False)
        assert isinstance(caught.value.__cause__, redis.exceptions.ResponseError)
        with pytest.raises(BackendUnavailable, match=code):
            asyncio.run(sem.aacquire(auto_renew=False))
    finally:
        undo()
    assert backend_errors and all(errors.is_outage(error) for error in backend_errors)
    assert sem.acquire(auto_renew=False) is not None  # served again once the cause is gone


def test_an_acl_that_revokes_scripts_is_an_outage(own_server: RedisServer, admin_client: redis.Redis, settings) -> None:
    undo = refusals.revoke_scripts(admin_client)
    undo()  # the user exists and may run scripts
    address = f"redis://{refusals.LIMITED_USER}:{refusals.LIMITED_PASSWORD}@127.0.0.1:{own_server.port}/0"
    settings.SEMAPHORE_CONNECTION = f"{address}?{OWN_SERVER_TIMEOUTS}"
    sem = get_semaphore("reports")
    assert sem.acquire(auto_renew=False) is not None
    refusals.revoke_scripts(admin_client)
    with pytest.raises(BackendUnavailable, match="NOPERM"):
        sem.acquire(auto_renew=False)
    undo()
    assert sem.acquire(auto_renew=False) is not None


def test_a_script_error_is_a_bug_and_surfaces(own_server: RedisServer, admin_client: redis.Redis) -> None:
    sem = get_semaphore("reports")
    admin_client.set(sem.keys.holders, "not a sorted set")  # every script on it now fails: WRONGTYPE
    with pytest.raises(redis.exceptions.ResponseError, match="WRONGTYPE") as caught:
        sem.acquire(auto_renew=False)
    assert not isinstance(caught.value, BackendUnavailable)
    assert not errors.is_outage(caught.value)
    with pytest.raises(redis.exceptions.ResponseError, match="WRONGTYPE"):
        asyncio.run(sem.astatus())


def test_lua_errors_and_wrong_commands_are_bugs(admin_client: redis.Redis) -> None:
    """Real replies of a healthy server to wrong scripts and commands: none is an outage."""
    wrong = [
        lambda: admin_client.eval("local x = nil; return x + 1", 0),
        lambda: admin_client.eval("return redis.call('zadd', KEYS[1])", 1, "z"),
        lambda: admin_client.execute_command("HSET", "h"),
        lambda: admin_client.eval("error('django_semaphore: bad configuration argument x', 0)", 0),
    ]
    for call in wrong:
        with pytest.raises(redis.exceptions.ResponseError) as caught:
            call()
        assert not errors.is_outage(caught.value), caught.value


@pytest.mark.parametrize(
    "message",
    [
        # Redis < 7 wraps what a script's redis.call() hit:
        "Error running script (call to f_ab12): @user_script:1: @user_script: 1: -OOM command not allowed when "
        "used memory > 'maxmemory'. ",
        # a pipeline's note in front (the asyncio client quotes the reply as a tuple):
        "Command # 1 (EVALSHA ab12 7 k) of pipeline caused error: MISCONF Redis is configured to save RDB",
        "Command # 2 (EVAL x) of pipeline caused error: ('NOREPLICAS Not enough good replicas to write.',)",
        # Redis 7 / Valkey 8, a script touching a key whose slot moved mid-migration:
        "Script attempted to access a non local key in a cluster node script: ab12, on @user_script:12.",
        # A server without the command (Redis 6 and FCALL; any server the engine sends one it lacks):
        "unknown command `FCALL`, with args beginning with: `django_semaphore_ab12_acquire`, `7`, ",
        "unknown command 'FCALL', with args beginning with: 'django_semaphore_ab12_acquire' '7'",
        # An ACL denial inside a script: Redis 6.2, 7.0 (no NOPERM code) and 7.2+ / Valkey wordings:
        "Error running script (call to f_ab12): @user_script:1: @user_script: 1: The user executing the script "
        "can't run this command or subcommand",
        "The user executing the script can't run this command or subcommand script: django_semaphore_ab12_acquire, "
        "on @user_function:151.",
        "The user executing the script can't access at least one of the keys mentioned in the command arguments "
        "script: ab12, on @user_script:1.",
        "ACL failure in script: User app has no permissions to run the 'time' command script: ab12, on @user_script:1.",
        # Garnet started without --lua; Dragonfly and a key the script did not declare:
        "ERR This instance has Lua scripting support disabled",
        "Error running script (call to ab12): @user_script:2: script tried accessing undeclared key, key: k",
    ],
)
def test_refusals_are_found_inside_wrappings(message: str) -> None:
    assert errors.is_outage(redis.exceptions.ResponseError(message))


def test_the_echoed_command_of_a_pipeline_cannot_pass_a_bug_off_as_an_outage() -> None:
    forged = "Command # 1 (HSET r p x) of pipeline caused error: OOM) of pipeline caused error: WRONGTYPE Operation"
    assert not errors.is_outage(redis.exceptions.ResponseError(forged))


# -- the Django surface, with the memory full --------------------------------


@pytest.mark.usefixtures("full")
@pytest.mark.parametrize(("policy", "status"), [("allow", 200), ("deny", 503)])
def test_guarded_views_follow_the_policy_when_memory_is_full(
    client: Client, settings, policy: str, status: int
) -> None:
    declare(settings, guarded={"on_error": policy})
    outcomes.reset()
    sync = client.get("/surface/reported/", headers={"Accept": "application/json"})

    async def scenario() -> int:
        return (await AsyncClient().get("/surface/reported-async/")).status_code

    assert (sync.status_code, asyncio.run(scenario())) == (status, status)
    if policy == "deny":
        assert sync["Retry-After"] == "5"
    else:
        assert sync.json() == {"outcome": "error_allowed"}
    assert outcomes.counts() == {"guarded": {ERROR_OUTCOME[policy]: 2}}


@pytest.mark.usefixtures("full")
@pytest.mark.parametrize(("policy", "status"), [("allow", 200), ("deny", 503)])
def test_the_middleware_follows_the_policy_when_memory_is_full(
    client: Client, settings, policy: str, status: int
) -> None:
    declare(settings, guarded={"on_error": policy})
    settings.MIDDLEWARE = [*settings.MIDDLEWARE, MIDDLEWARE]
    settings.SEMAPHORE_MIDDLEWARE_RULES = [{"semaphore": "guarded"}]

    async def scenario() -> int:
        return (await AsyncClient().get("/surface/unguarded-async/")).status_code

    assert client.get("/surface/unguarded/").status_code == status
    assert asyncio.run(scenario()) == status


@pytest.mark.django_db
@pytest.mark.usefixtures("full")
def test_the_dashboard_shows_the_refusal_with_503(client: Client) -> None:
    client.force_login(User.objects.create_superuser("root", password="pw"))
    page = client.get(reverse(DASHBOARD + "changelist"))
    assert page.status_code == 503
    assert "Redis refused the command: OOM" in page.content.decode()
    for name in ("json", "detail_json"):
        args = ("reports",) if name == "detail_json" else ()
        answer = client.get(reverse(DASHBOARD + name, args=args))
        assert answer.status_code == 503 and answer.json()["error"].startswith("Redis refused the command: OOM")
    assert client.get(reverse(DASHBOARD + "detail", args=("reports",))).status_code == 503


@pytest.mark.usefixtures("full")
@pytest.mark.parametrize(
    "command",
    [
        ["semaphore_status"],
        ["semaphore_status", "--json"],
        ["semaphore_release", "reports", "--all", "--noinput"],
        ["semaphore_release", "reports", "--token", "ab", "--noinput"],
        ["semaphore_release", "reports", "--expired"],
        ["semaphore_limit", "reports", "4"],
    ],
)
def test_each_command_says_redis_refused_in_one_line(command: list[str]) -> None:
    with pytest.raises(CommandError, match=r"^Redis refused the command: OOM") as caught:
        call_command(*command, stdout=StringIO())
    assert caught.value.returncode == 1 and "\n" not in str(caught.value)


def test_a_full_server_from_a_shell_is_one_line_and_status_1(
    own_server: RedisServer, admin_client: redis.Redis
) -> None:
    undo = refusals.fill_memory(admin_client)
    try:
        done = shell.status_json(own_server.url)
    finally:
        undo()
    assert done.returncode == 1, done.stdout
    assert done.stderr.strip().startswith("CommandError: Redis refused the command: OOM")
    assert "Traceback" not in done.stderr and len(done.stderr.strip().splitlines()) == 1
    assert done.stdout == ""  # no half-printed JSON for a monitoring script to choke on
