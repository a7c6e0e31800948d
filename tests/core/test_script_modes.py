"""One engine, two ways to call it: the Functions library, or the same Lua with EVALSHA.

Each server here lacks Functions the way production servers do (see
tests/support/modes.py): the commands do not exist (Redis 6, KeyDB,
Dragonfly), the ACL user may not run them, or may call but not load them.
The engine runs every operation all the same, decides how once per client
(one log line), and a server that refuses scripts altogether, or a command
inside one, meets the failure policy: never a 500, never a traceback.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterator

import pytest
import redis
from django.test import Client

from django_semaphore import BackendUnavailable, Semaphore, get_semaphore
from django_semaphore.core import scripts
from django_semaphore.core.calls import ScriptCall
from django_semaphore.core.conf import SemaphoreConfig
from django_semaphore.testing import RedisServer, find_binary

from ..conftest import OWN_SERVER_TIMEOUTS
from ..support import modes, shell
from ..support.guards import declare
from ..support.polling import answered

pytestmark = pytest.mark.processes  # every test starts servers of its own


def point_at(settings, url: str) -> None:
    settings.SEMAPHORE_CONNECTION = f"{url}?{OWN_SERVER_TIMEOUTS}"


def exercise() -> None:
    """Every operation of the engine once, sync and async: none may depend on the way it is called."""
    sem = get_semaphore("single")
    first = sem.acquire(auto_renew=False)
    assert first is not None
    # Waits in line (BLPOP), then leaves it (cancel), all within the wait and 0.2 s more: asked again where a
    # loaded machine took longer (an outage to the engine, and no part of the point here).
    assert answered(lambda: sem.acquire(wait=0.05)) is None
    assert first.renew() is True
    assert sem.status().used == 1
    assert sem.add_permits(1) == 2
    # A wait of its own: where the waiting acquire above was asked again, the try a loaded machine cut short
    # may have left its place in line (its cancel cut short too), which the new permit serves first until
    # its waiter TTL ends (1 s).
    second = sem.acquire(wait=5, auto_renew=False)
    assert second is not None
    assert sem.force_release(second.token) is True
    assert sem.set_limit(None) == 1
    assert first.release() is True
    keyed = get_semaphore("search", key="alice").acquire(auto_renew=False)  # admits a partition too
    assert keyed is not None and keyed.release() is True
    confirmed = Semaphore(SemaphoreConfig.from_options("confirmed", {"limit": 1, "replicas": 1}))
    with pytest.raises(BackendUnavailable, match="replica"):  # the script and WAIT in one pipeline; no replica
        confirmed.acquire(auto_renew=False)
    assert confirmed.status().used == 0  # given back at once

    async def asynchronously() -> None:
        permit = await sem.aacquire(auto_renew=False)
        assert permit is not None
        assert (await sem.astatus()).used == 1
        assert await permit.arelease() is True

    asyncio.run(asynchronously())


@pytest.fixture
def admin(own_server: RedisServer) -> Iterator[redis.Redis]:
    with redis.Redis.from_url(own_server.url) as client:
        yield client


def test_a_server_without_fcall_runs_every_operation_with_evalsha(settings) -> None:
    with modes.start_without(find_binary(), "fcall", "function") as server:
        point_at(settings, server.url)
        exercise()
        with redis.Redis.from_url(server.url) as admin:
            assert modes.calls(admin, "evalsha") > 0


def test_a_user_denied_function_and_fcall_runs_every_operation_with_evalsha(
    own_server: RedisServer, admin: redis.Redis, settings
) -> None:
    point_at(settings, modes.without_functions(own_server))
    exercise()
    assert modes.calls(admin, "evalsha") > 0
    # Decided once per client (the sync one and each event loop's asyncio one), not per call.
    assert modes.rejected(admin, "fcall") <= 2


def test_a_user_who_may_call_but_not_load_functions_runs_with_evalsha_until_they_are_loaded(
    own_server: RedisServer, admin: redis.Redis, settings
) -> None:
    if not modes.has_functions(admin):
        pytest.skip("this server has no Redis Functions")
    modes.add_user(admin, "caller", "function")
    point_at(settings, modes.user_url(own_server, "caller"))
    admin.function_flush()
    sem = get_semaphore("single")
    held = sem.acquire(auto_renew=False)  # "Function not found", FUNCTION LOAD refused: EVALSHA
    assert held is not None
    assert modes.calls(admin, "evalsha") + modes.calls(admin, "eval") > 0
    # An operator loads the library ahead of a deploy; the script cache is lost (a restart, a
    # failover): the next call meets NOSCRIPT (and runs), the one after decides again: Functions.
    scripts.load(admin)
    admin.script_flush()
    fcalls = modes.calls(admin, "fcall")
    again = sem.acquire(wait=0)
    assert again is None and modes.calls(admin, "fcall") == fcalls
    assert held.release() is True
    assert modes.calls(admin, "fcall") == fcalls + 1


def test_the_way_is_logged_once_per_client(own_server: RedisServer, settings, caplog) -> None:
    point_at(settings, modes.without_functions(own_server))
    sem = get_semaphore("single")
    with caplog.at_level(logging.INFO, logger="django_semaphore.scripts"):
        for _ in range(5):
            permit = sem.acquire(auto_renew=False)
            assert permit is not None and permit.release() is True
    chosen = [record for record in caplog.records if record.name == "django_semaphore.scripts"]
    assert len(chosen) == 1, [record.getMessage() for record in chosen]
    assert "EVALSHA" in chosen[0].getMessage()


def test_a_flushed_script_cache_is_reloaded_and_holders_keep_their_permits(
    own_server: RedisServer, admin: redis.Redis, settings
) -> None:
    point_at(settings, modes.without_functions(own_server))
    sem = get_semaphore("reports")
    held = sem.acquire(auto_renew=False)
    assert held is not None
    admin.script_flush()
    other = sem.acquire(auto_renew=False)  # NOSCRIPT, then the script is sent again
    assert other is not None and other.fence > held.fence
    admin.script_flush()
    assert held.release() is True and other.release() is True
    assert sem.status().used == 0


@pytest.mark.parametrize("way", ["functions", "evalsha"])
def test_a_command_the_acl_denies_inside_the_script_follows_the_policy(
    own_server: RedisServer, admin: redis.Redis, settings, client: Client, way: str
) -> None:
    """TIME, refused inside the script: Redis 7.0 says so without a NOPERM code, still a refusal."""
    if way == "functions" and not modes.has_functions(admin):
        pytest.skip("this server has no Redis Functions")
    denied = ["time", *(modes.FUNCTION_COMMANDS if way == "evalsha" else ())]
    modes.add_user(admin, "no-time", *denied)
    point_at(settings, modes.user_url(own_server, "no-time"))
    with pytest.raises(BackendUnavailable, match=r"(?i)time|permission|can't run"):
        get_semaphore("single").acquire(auto_renew=False)
    for policy, status in (("deny", 503), ("allow", 200)):
        declare(settings, guarded={"on_error": policy})
        assert client.get("/surface/reported/").status_code == status
    _status_command_says_one_line(modes.user_url(own_server, "no-time"))


def test_a_server_that_refuses_every_script_follows_the_policy(settings, client: Client) -> None:
    """Functions missing and Lua switched off (Garnet without --lua): an outage, not a 500."""
    with modes.start_without(find_binary(), "fcall", "function", "eval", "evalsha") as server:
        point_at(settings, server.url)
        with pytest.raises(BackendUnavailable):
            get_semaphore("single").acquire(auto_renew=False)
        with pytest.raises(BackendUnavailable):
            asyncio.run(get_semaphore("single").aacquire(auto_renew=False))
        for policy, status in (("deny", 503), ("allow", 200)):
            declare(settings, guarded={"on_error": policy})
            assert client.get("/surface/reported/").status_code == status
        _status_command_says_one_line(server.url)


def _status_command_says_one_line(url: str) -> None:
    done = shell.status_json(url)
    assert done.returncode == 1, done.stdout
    assert done.stderr.startswith("CommandError: Redis refused the command"), done.stderr
    assert "Traceback" not in done.stderr and len(done.stderr.strip().splitlines()) == 1


def test_calls_that_loaded_the_library_at_once_leave_the_older_libraries_to_one_of_them() -> None:
    """A cold worker's first requests all find the library missing and load it; each then listed the libraries
    on the client's own pool, a connection (over TLS, a handshake and an SSL context) each. One at a time
    lists now: the others go on with their call."""
    client = redis.Redis(host="127.0.0.1", port=1, db=15)  # never connected: the exchanges are driven by hand
    call = ScriptCall("status", ["k"], [])
    not_found = redis.ResponseError("Function not found")

    def to_the_listing(exchange: scripts.Exchange) -> scripts.Step:
        assert isinstance(next(exchange), scripts.Batch)  # FCALL
        assert exchange.send([not_found]) == scripts.Method("function_load", (scripts.library()[1],), {"replace": True})
        assert exchange.send(scripts.library()[0]) == scripts.Batch([scripts.heartbeat()])
        return exchange.send(["OK"])

    first, second = scripts.exchange(client, [call], []), scripts.exchange(client, [call], [])
    listing = to_the_listing(first)
    assert isinstance(listing, scripts.Method) and listing.name == "function_list"
    again = to_the_listing(second)
    assert isinstance(again, scripts.Batch) and again.commands[0][:2] == ("FCALL", scripts.function("status"))
    assert first.send([]) == scripts.Batch([("FCALL", scripts.function("status"), 1, "k")])  # listed none: on it goes
    third = scripts.exchange(client, [call], [])  # the first is done listing: a later load lists again
    assert to_the_listing(third).name == "function_list"  # type: ignore[union-attr]


def test_a_library_that_is_gone_again_at_every_call_is_an_outage_never_a_500(
    own_server: RedisServer, admin: redis.Redis, settings, client: Client, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An operator's FUNCTION FLUSH in a loop may leave the scripts missing at every one of a call's rounds (each
    load succeeds, the next FCALL finds nothing): the call follows the failure policy, as for a server that
    cannot serve now, where it raised a bare ResponseError and a guarded view answered 500."""
    if not modes.has_functions(admin):
        pytest.skip("this server has no Redis Functions")
    name, source = scripts.library()
    # Registered under other names: every FUNCTION LOAD succeeds, and the next FCALL still finds nothing.
    gone = source.replace(f"register_function('{name}_", f"register_function('{name}_gone_")
    monkeypatch.setattr(scripts, "library", lambda: (name, gone))
    with pytest.raises(BackendUnavailable):
        get_semaphore("single").acquire(auto_renew=False)
    with pytest.raises(BackendUnavailable):
        asyncio.run(get_semaphore("single").aacquire(auto_renew=False))
    for policy, status in (("deny", 503), ("allow", 200)):
        declare(settings, guarded={"on_error": policy})
        assert client.get("/surface/reported/").status_code == status
