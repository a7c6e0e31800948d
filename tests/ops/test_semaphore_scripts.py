"""``manage.py semaphore_scripts``: load, list and clean up the Lua this app leaves on a real server.

Older versions' libraries are made here as a release would have made them:
this version's source under another name (a digest of other Lua) and
another version line. Each test runs on a server of its own.
"""

from __future__ import annotations

from collections.abc import Iterator
from io import StringIO

import pytest
import redis
from django.core.management import CommandError, call_command

from django_semaphore import get_semaphore
from django_semaphore.core import scripts
from django_semaphore.testing import RedisServer, find_binary

from ..conftest import OWN_SERVER_TIMEOUTS
from ..support import modes

pytestmark = pytest.mark.processes  # every test starts a server of its own


def run(*args: str) -> str:
    out = StringIO()
    call_command("semaphore_scripts", *args, stdout=out)
    return out.getvalue()


def old_library(client: redis.Redis, digest: str, version: str, *, in_use: bool) -> str:
    """Load the library an older release would have loaded; ``in_use``: a process of it still runs."""
    own, source = scripts.library()
    name = f"{scripts.LIBRARY_PREFIX}{digest}"
    source = source.replace(own, name).replace(
        f"-- django-semaphore {scripts.app_version()}\n", f"-- django-semaphore {version}\n"
    )
    client.function_load(source)
    if in_use:
        client.set(scripts.heartbeat_key(name), version, px=int(scripts.HEARTBEAT_TTL * 1000))
    return name


def libraries_on(client: redis.Redis) -> set[str]:
    return scripts.library_names(client.function_list())


@pytest.fixture
def admin(own_server: RedisServer) -> Iterator[redis.Redis]:
    with redis.Redis.from_url(own_server.url) as client:
        if not modes.has_functions(client):
            pytest.skip("this server has no Redis Functions")
        yield client


def test_load_puts_this_version_on_the_server_for_an_app_that_may_not_load_code(
    own_server: RedisServer, admin: redis.Redis, settings
) -> None:
    modes.add_user(admin, "caller", "function")  # may FCALL, may not FUNCTION LOAD
    settings.SEMAPHORE_CONNECTION = f"{modes.user_url(own_server, 'caller')}?{OWN_SERVER_TIMEOUTS}"
    printed = run("--load", "--connection", own_server.url)  # the operator's account
    assert f"Loaded {scripts.library()[0]}" in printed
    assert scripts.library()[0] in libraries_on(admin)
    permit = get_semaphore("single").acquire(auto_renew=False)
    assert permit is not None and permit.release() is True
    assert modes.calls(admin, "fcall") > 0 and modes.calls(admin, "evalsha") + modes.calls(admin, "eval") == 0


def test_list_shows_each_library_with_its_version_and_whether_a_process_uses_it(
    own_server: RedisServer, admin: redis.Redis
) -> None:
    used = old_library(admin, "0123456789ab", "0.1.7", in_use=True)
    unused = old_library(admin, "ba9876543210", "0.1.3", in_use=False)
    listed = run("--connection", own_server.url)
    lines = {line.split()[0]: line for line in listed.splitlines() if line.startswith(scripts.LIBRARY_PREFIX)}
    assert "0.1.7" in lines[used] and "in use" in lines[used]
    assert "0.1.3" in lines[unused] and "--clean deletes it" in lines[unused]
    assert "this version, not loaded" in lines[scripts.library()[0]]
    run("--load", "--connection", own_server.url)
    assert "this version" in run("--list", "--connection", own_server.url)


def test_clean_deletes_only_what_no_process_uses_and_never_flushes_the_script_cache(
    own_server: RedisServer, admin: redis.Redis
) -> None:
    run("--load", "--connection", own_server.url)
    used = old_library(admin, "0123456789ab", "0.1.7", in_use=True)
    unused = old_library(admin, "ba9876543210", "0.1.3", in_use=False)
    admin.function_load("#!lua name=another_app\nredis.register_function('another_app_f', function() return 1 end)")
    theirs = admin.script_load("return 'another application'")
    printed = run("--clean", "--noinput", "--connection", own_server.url)
    assert f"Deleted {unused} (django-semaphore 0.1.3)" in printed
    assert libraries_on(admin) == {scripts.library()[0], used, "another_app"}
    assert admin.script_exists(theirs) == [True]
    assert "Nothing to clean" in run("--clean", "--noinput", "--connection", own_server.url)


def test_clean_asks_first(own_server: RedisServer, admin: redis.Redis, monkeypatch) -> None:
    unused = old_library(admin, "ba9876543210", "0.1.3", in_use=False)
    monkeypatch.setattr("builtins.input", lambda prompt: "no")
    with pytest.raises(CommandError, match="nothing was deleted"):
        run("--clean", "--connection", own_server.url)
    assert unused in libraries_on(admin)


def test_a_new_version_deletes_the_unused_libraries_when_it_loads_its_own(
    own_server: RedisServer, admin: redis.Redis
) -> None:
    used = old_library(admin, "0123456789ab", "0.1.7", in_use=True)
    unused = old_library(admin, "ba9876543210", "0.1.3", in_use=False)
    permit = get_semaphore("single").acquire(auto_renew=False)  # "Function not found": loads its own
    assert permit is not None and permit.release() is True
    assert libraries_on(admin) == {scripts.library()[0], used}
    assert unused not in libraries_on(admin)
    assert admin.exists(scripts.heartbeat_key(scripts.library()[0]))


def test_load_on_a_server_without_functions_puts_the_scripts_in_the_cache(settings) -> None:
    with modes.start_without(find_binary(), "fcall", "function") as server:
        printed = run("--load", "--connection", server.url)
        assert "No Redis Functions here" in printed and "EVALSHA" in printed
        with redis.Redis.from_url(server.url) as client:
            assert all(client.script_exists(*(scripts.script(op).sha for op in scripts.OPERATIONS)))
        listed = run("--connection", server.url)
        assert "No Redis Functions here" in listed
        assert f"{len(scripts.OPERATIONS)} of this version's {len(scripts.OPERATIONS)} scripts" in listed


def test_an_account_that_may_load_nothing_is_told_so_in_one_line(own_server: RedisServer) -> None:
    with redis.Redis.from_url(own_server.url) as admin:
        modes.add_user(admin, "reader", "function", "script", "eval", "evalsha")
    with pytest.raises(CommandError, match=r"^Redis refused the command: NOPERM"):
        run("--load", "--connection", modes.user_url(own_server, "reader"))
