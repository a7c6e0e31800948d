"""The least-privilege ACL lines of docs/servers.md, each applied to a real server as written.

Under each, the engine (every operation, sync and async, keyed semaphores'
registry included), the management commands and the deploy check work, in
the way the line allows. The lines name exactly the commands the engine
runs (read from the Lua files, plus the ones Python sends), and none newer
than Redis 6.0, the lowest version supported. And they let the deploy
check read the eviction policy (``+info|memory``): a shared server under
``noeviction`` is W007, one under ``allkeys-lru`` E019 (``manage.py check
--deploy`` exits 1); a user without the grant gets W010, whose hint is the
line that fixes it. What each grant the docs weigh reveals is tested here
too, on whichever server the suite runs (Redis 7, Valkey 8, Redis 6.2).
"""

from __future__ import annotations

import logging
import os
import re
import shlex
import subprocess
import sys
from io import StringIO
from pathlib import Path

import pytest
import redis
from django.core.management import call_command
from django.core.management.base import SystemCheckError

from django_semaphore import get_semaphore
from django_semaphore.core import registry, scripts
from django_semaphore.core.connection import get_client
from django_semaphore.core.tally import tally
from django_semaphore.metrics.reading import read as reading_read
from django_semaphore.ops import libraries, redis_check
from django_semaphore.ops.acl_denials import HARMLESS
from django_semaphore.ops.memory_check import check_eviction_policy
from django_semaphore.testing import RedisServer, find_binary

from ..conftest import OWN_SERVER_TIMEOUTS
from ..core.test_script_modes import exercise
from ..support import modes

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.processes  # starts servers of its own

LUA = ROOT / "django_semaphore" / "core" / "lua"
PAGE = ROOT / "docs" / "servers.md"
LINES = [
    line
    for block in re.findall(r"^```text\n(.*?)^```", PAGE.read_text(), re.S | re.M)
    for line in block.splitlines()
    if line.startswith("ACL SETUSER")
]
# What Python sends besides the scripts, and why.
PYTHON_COMMANDS = {
    "blpop",  # a waiter waits for its wake-up note
    "wait",  # semaphores with `replicas`
    "zrevrange",  # the partitions used most recently (dashboard, semaphore_status)
    "zscan",  # every partition, by pages
    "zcard",  # how many partitions
    "zrem",  # partitions that expired leave the registry
    "hdel",  # and their labels
    "hget",  # one partition's label
    "hmget",  # the labels of a page of partitions
    "exists",  # whether a listed partition still exists
    "set",  # the library heartbeat
    "time",  # semaphore_release --expired
    "zrangebyscore",  # semaphore_release --expired
    "hgetall",  # the metrics' counts, read at scrape time (core/tally.py)
}
# Each command the engine sends, and the Redis version that introduced it (the lowest supported is 6.0).
SINCE = {
    "blpop": (6, 0),  # fractional timeouts (2.0 for whole seconds)
    "del": (1, 0),
    "eval": (2, 6),
    "evalsha": (2, 6),
    "exists": (1, 0),
    "get": (1, 0),
    "hdel": (2, 0),
    "hexists": (2, 0),
    "hget": (2, 0),
    "hgetall": (2, 0),
    "hincrby": (2, 0),
    "hmget": (2, 0),
    "hset": (2, 0),  # several fields at once: 4.0
    "hsetnx": (2, 0),
    "lrange": (1, 0),
    "ltrim": (1, 0),
    "pexpire": (2, 6),
    "pexpireat": (2, 6),
    "rpush": (1, 0),
    "set": (1, 0),  # PX: 2.6.12
    "time": (2, 6),
    "wait": (3, 0),
    "zadd": (1, 2),  # XX: 3.0.2
    "zcard": (1, 2),
    "zcount": (2, 0),
    "zrange": (1, 2),
    "zrangebyscore": (1, 0),
    "zrank": (2, 0),
    "zrem": (1, 2),
    "zremrangebyscore": (1, 2),
    "zrevrange": (1, 2),
    "zscan": (2, 8),
    "zscore": (1, 2),
}
LOWEST = (6, 0)


def lua_commands() -> set[str]:
    """Every command the scripts run: redis.call/pcall, and the write plan's add()/drop()."""
    text = "".join(path.read_text() for path in LUA.glob("*.lua"))
    return {name.lower() for name in re.findall(r"(?:redis\.p?call|add|drop)\('([A-Z]+)'", text)}


def line(*wanted: str, unwanted: str | None = None) -> str:
    """The one line with every word ``wanted`` (and not ``unwanted``)."""
    (found,) = [
        entry
        for entry in LINES
        if all(word in entry.split() for word in wanted) and (unwanted is None or unwanted not in entry.split())
    ]
    return found


APP_LOADS = line("+fcall", "+function|load")
APP_CALLS = line("+fcall", unwanted="+function|load")
APP_EVALSHA = line("+evalsha")
DEPLOYER = line("semaphore-deployer")


def data_commands(entry: str) -> set[str]:
    scripting = {"fcall", "eval", "evalsha"}
    return {word[1:] for word in entry.split() if word.startswith("+") and "|" not in word} - scripting


def test_the_lines_name_exactly_what_the_engine_runs_and_nothing_newer_than_redis_6_0() -> None:
    engine = lua_commands() | PYTHON_COMMANDS
    for entry in (APP_LOADS, APP_CALLS, APP_EVALSHA):
        assert data_commands(entry) == engine, entry
    assert {name: SINCE.get(name) for name in engine | {"eval", "evalsha"}} == {
        name: version for name, version in SINCE.items() if version <= LOWEST
    }


def test_the_deploy_check_can_try_each_command_the_scripts_run_on_its_own() -> None:
    """E015 names a command an ACL denies a script by sending each alone (ops/acl_denials.py): all of them."""
    assert set(HARMLESS) == lua_commands()


def apply(admin: redis.Redis, entry: str) -> str:
    """Run the docs' line (its password replaced) and return the user's name."""
    words = shlex.split(entry.replace(">CHANGE-ME", f">{modes.PASSWORD}"))
    admin.execute_command(*words)
    return words[2]


def run(*args: str) -> str:
    out = StringIO()
    call_command(*args, stdout=out)
    return out.getvalue()


def everything_works(settings, url: str) -> None:
    """The engine, the commands and the deploy check, as the app's user."""
    settings.SEMAPHORE_CONNECTION = f"{url}?{OWN_SERVER_TIMEOUTS}"
    exercise()
    search = get_semaphore("search")
    bob = get_semaphore("search", key="bob").acquire(auto_renew=False)
    assert bob is not None
    assert sorted(search.partitions().values()) == ["alice", "bob"] and search.partition_count() == 2
    assert sorted(label for _hash, label in search.iter_partitions()) == ["alice", "bob"]
    bob.release()
    # Past its cap, a semaphore evicts its idle partitions, keys and all (admit, evict and settle scripts).
    capped = {**settings.SEMAPHORES["search"], "max_partitions": 1}
    settings.SEMAPHORES = {**settings.SEMAPHORES, "search": capped}
    assert get_semaphore("search", key="carol").acquire(auto_renew=False) is not None
    assert "bob" not in search.partitions().values()
    assert get_client().wait(0, 10) == 0  # what `replicas` semaphores send
    assert '"schema": 2' in run("semaphore_status", "--json", "--holders")
    run("semaphore_release", "reports", "--expired")
    run("semaphore_limit", "reports", "7")
    run("semaphore_limit", "reports", "--clear")
    assert redis_check.check_redis_reachable() == []
    # The metrics: the counts written by the tally script, then read with the gauges as a scrape does,
    # partitions and their places (the metric_series script) too.
    tally.flush()
    assert tally.pending() == {"attempts": {}, "holds": {}}
    settings.SEMAPHORE_METRICS_PARTITIONS = True
    carol = get_semaphore("search", key="carol").acquire(auto_renew=False)
    readings = {reading.name: reading for reading in reading_read()}
    assert readings.keys() >= {"reports", "search"}
    keyed = readings["search"].keyed
    assert keyed is not None and [part.key for part in keyed.parts] == ["carol"]
    assert carol is not None and carol.release()


@pytest.fixture
def admin(own_server: RedisServer, settings) -> redis.Redis:
    settings.SEMAPHORE_KEY_PREFIX = "semaphore:"  # what the lines' key patterns name
    registry._recorded.clear()  # partitions this process recorded with that prefix were on another server
    with redis.Redis.from_url(own_server.url) as client:
        yield client


@pytest.fixture
def functions(admin: redis.Redis) -> None:
    if not modes.has_functions(admin):
        pytest.skip("this server has no Redis Functions")


@pytest.mark.usefixtures("functions")
def test_the_functions_line_of_an_app_that_loads_its_library(
    own_server: RedisServer, admin: redis.Redis, settings
) -> None:
    everything_works(settings, modes.user_url(own_server, apply(admin, APP_LOADS)))
    assert modes.Way("functions").ran_only_this_way(admin)


@pytest.mark.usefixtures("functions")
def test_the_functions_lines_of_an_app_whose_library_an_operator_loads(
    own_server: RedisServer, admin: redis.Redis, settings
) -> None:
    deployer = modes.user_url(own_server, apply(admin, DEPLOYER))
    app = modes.user_url(own_server, apply(admin, APP_CALLS))
    admin.function_flush()
    assert "Loaded" in run("semaphore_scripts", "--load", "--connection", deployer)
    everything_works(settings, app)
    assert "this version" in run("semaphore_scripts", "--clean", "--noinput", "--list", "--connection", deployer)
    assert modes.Way("functions").ran_only_this_way(admin)


def test_the_evalsha_line(own_server: RedisServer, admin: redis.Redis, settings) -> None:
    everything_works(settings, modes.user_url(own_server, apply(admin, APP_EVALSHA)))
    assert modes.Way("evalsha").ran_only_this_way(admin)


def test_the_evalsha_line_on_a_server_without_functions(settings) -> None:
    settings.SEMAPHORE_KEY_PREFIX = "semaphore:"
    registry._recorded.clear()
    with modes.start_without(find_binary(), "fcall", "function") as server, redis.Redis.from_url(server.url) as admin:
        everything_works(settings, modes.user_url(server, apply(admin, APP_EVALSHA)))
        assert scripts.mode_of(get_client()) == "evalsha"


# -- the eviction checks under the lines ---------------------------------------------------------

APP_LINES = {"functions, loaded by the app": APP_LOADS, "functions, loaded by an operator": APP_CALLS}
APP_LINES["evalsha"] = APP_EVALSHA
READ_POLICY = "+info|memory"


def test_the_app_lines_grant_the_memory_section_of_info_and_nothing_of_config() -> None:
    for entry in APP_LINES.values():
        words = entry.split()
        assert READ_POLICY in words, entry
        assert not any(word.startswith(("+config", "+@admin", "+@dangerous")) or word == "+info" for word in words)


def deploy_check() -> str:
    out, err = StringIO(), StringIO()
    call_command("check", deploy=True, tags=[redis_check.REDIS_TAG], stdout=out, stderr=err)
    return out.getvalue() + err.getvalue()


def _evicting(admin: redis.Redis, policy: str) -> None:
    admin.config_set("maxmemory-policy", policy)
    admin.config_set("maxmemory", "64mb")


def _as(settings, server: RedisServer, user: str) -> None:
    settings.SEMAPHORE_CONNECTION = f"{modes.user_url(server, user)}?{OWN_SERVER_TIMEOUTS}"


@pytest.mark.parametrize("which", sorted(APP_LINES))
def test_under_each_app_line_the_eviction_checks_read_the_policy(
    own_server: RedisServer, admin: redis.Redis, settings, which: str
) -> None:
    """The server is also a cache's: noeviction is W007; allkeys-lru is E019, which fails the check."""
    entry = APP_LINES[which]
    if "+fcall" in entry.split() and not modes.has_functions(admin):
        pytest.skip("this server has no Redis Functions")
    if entry == APP_CALLS:
        libraries.load(admin)  # what `semaphore_scripts --load` does as the deployer, at each deploy
    _as(settings, own_server, apply(admin, entry))
    settings.CACHES = {
        **settings.CACHES,
        "pages": {
            "BACKEND": "django_redis.cache.RedisCache",
            "LOCATION": own_server.url,
            "OPTIONS": {"SOCKET_CONNECT_TIMEOUT": 0.5, "SOCKET_TIMEOUT": 1},
        },
    }
    _evicting(admin, "noeviction")
    said = deploy_check()
    assert "django_semaphore.W007" in said and "'pages'" in said
    assert "W010" not in said and "E015" not in said
    _evicting(admin, "allkeys-lru")
    with pytest.raises(SystemCheckError, match=r"django_semaphore\.E019") as failed:
        deploy_check()
    assert "E015" not in str(failed.value)


def test_manage_py_check_deploy_exits_1_under_the_evalsha_line_on_a_shared_allkeys_lru_server(
    own_server: RedisServer, admin: redis.Redis
) -> None:
    """As a team following servers.md to the letter runs it: the settings' cache is the semaphores' server."""
    user = apply(admin, APP_EVALSHA)
    _evicting(admin, "allkeys-lru")
    env = {
        **os.environ,
        "REDIS_URL": f"{modes.user_url(own_server, user)}?{OWN_SERVER_TIMEOUTS}",
        "DJANGO_SETTINGS_MODULE": "tests.settings",
        "SEMAPHORE_KEY_PREFIX": "semaphore:",
    }
    done = subprocess.run(
        [sys.executable, "-m", "django", "check", "--deploy", "--tag", redis_check.REDIS_TAG],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 1, done.stderr
    assert "django_semaphore.E019" in done.stderr and "Traceback" not in done.stderr


def test_a_user_without_the_grant_gets_w009_whose_hint_is_the_line_that_fixes_it(
    own_server: RedisServer, admin: redis.Redis, settings
) -> None:
    user = apply(admin, " ".join(word for word in APP_EVALSHA.split() if word != READ_POLICY))
    _as(settings, own_server, user)
    _evicting(admin, "allkeys-lru")
    [message] = check_eviction_policy()
    assert message.id == "django_semaphore.W010" and message.level == logging.WARNING
    assert "noeviction" in message.msg and "NOPERM" in message.msg
    fix = re.findall(r"ACL SETUSER \S+ \S+", message.hint)
    assert fix == [f"ACL SETUSER {user} {READ_POLICY}"]
    assert "django_semaphore.W010" in deploy_check()  # a warning: reported, the check passes
    admin.execute_command(*shlex.split(fix[0]))
    assert [m.id for m in check_eviction_policy()] == ["django_semaphore.E019"]


@pytest.mark.parametrize("grant", [READ_POLICY, "+info", "+config|get"])
def test_each_grant_the_docs_weigh_lets_the_check_read_the_policy(
    own_server: RedisServer, admin: redis.Redis, settings, grant: str
) -> None:
    words = [word for word in APP_EVALSHA.split() if word != READ_POLICY]
    _as(settings, own_server, apply(admin, " ".join([*words, grant])))
    _evicting(admin, "allkeys-lru")
    assert [m.id for m in check_eviction_policy()] == ["django_semaphore.E019"]


def test_what_each_grant_reveals(own_server: RedisServer, admin: redis.Redis) -> None:
    """Why the lines grant ``+info|memory`` and never ``+config|get``, as docs/servers.md says."""
    admin.config_set("masterauth", "the-primarys-password")
    admin.execute_command("ACL", "SETUSER", "reads-config", "on", f">{modes.PASSWORD}", "-@all", "+config|get")
    admin.execute_command("ACL", "SETUSER", "reads-memory", "on", f">{modes.PASSWORD}", "-@all", READ_POLICY)
    with redis.Redis.from_url(modes.user_url(own_server, "reads-config")) as config:
        # CONFIG GET reads every parameter, the passwords this server uses to reach its primary included.
        assert config.config_get("masterauth") == {"masterauth": "the-primarys-password"}
    with redis.Redis.from_url(modes.user_url(own_server, "reads-memory")) as memory:
        assert memory.info("memory")["maxmemory_policy"]
        for refused in (("INFO",), ("INFO", "server"), ("CONFIG", "GET", "masterauth")):
            with pytest.raises(redis.exceptions.NoPermissionError):
                memory.execute_command(*refused)
        version = int(str(admin.info("server")["redis_version"]).split(".")[0])
        if version >= 7:
            # Redis 7 and Valkey take several sections, and the ACL looks at the first argument only.
            assert "redis_version" in memory.execute_command("INFO", "memory", "server")
        else:
            with pytest.raises(redis.exceptions.ResponseError, match="syntax error"):
                memory.execute_command("INFO", "memory", "server")
