"""One real Redis-protocol server for the whole session, on a free loopback port.

Every test gets its own key prefix, so tests never see each other's permits
and a ``REDIS_URL`` you point the suite at is never flushed.
"""

from __future__ import annotations

import fcntl
import os
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
import redis
from django.conf import settings

from django_semaphore import signals
from django_semaphore.core import bounded, scripts
from django_semaphore.core.outages import outage_log
from django_semaphore.core.renewal import renewer
from django_semaphore.testing import RedisServer, ServerNotFound, find_binary

from .support import modes
from .support.recorded import recorded

# SEMAPHORE_TEST_FAST_PATHS=0 (one CI cell, .ci/run): the engine without its fast paths (core/lua/fast*.lua),
# so every case keeps being proved on the full operations alone. Processes a test spawns keep them: the
# two run side by side on the same keys, as in a rolling deploy.
if os.environ.get("SEMAPHORE_TEST_FAST_PATHS") == "0":
    scripts.use_fast_paths(False)

# Short timeouts for servers a test stops or pauses, so outages show quickly.
OWN_SERVER_SOCKET_TIMEOUT = 0.5
OWN_SERVER_TIMEOUTS = f"socket_timeout={OWN_SERVER_SOCKET_TIMEOUT}&socket_connect_timeout={OWN_SERVER_SOCKET_TIMEOUT}"


@pytest.fixture(scope="session")
def redis_server() -> Iterator[RedisServer]:
    server = RedisServer().start()
    os.environ["REDIS_URL"] = server.url  # for worker processes the tests spawn
    settings.CACHES["default"]["LOCATION"] = server.url
    try:
        yield server
    finally:
        server.close()


@pytest.fixture(autouse=True)
def key_prefix(redis_server: RedisServer, settings) -> str:
    prefix = f"t{uuid.uuid4().hex[:10]}:"
    settings.SEMAPHORE_KEY_PREFIX = prefix
    return prefix


@pytest.fixture(autouse=True)
def no_outage_carried_over() -> Iterator[None]:
    """Each test starts with no outage on record: one left open by a test's stopped server is not the next's."""
    outage_log.reset()
    yield
    outage_log.reset()


@pytest.fixture(autouse=True)
def no_clean_ups_carried_over() -> Iterator[None]:
    """Each test starts with no clean-up waiting: one pinned to a server an earlier test stopped is not its own.

    The replies its released responses left unread (core/bounded.py's posts) are read in the test that sent them.
    """
    renewer.drop_pending()
    yield
    bounded.collect_posted()
    renewer.drop_pending()


@pytest.fixture
def redis_client(redis_server: RedisServer) -> Iterator[redis.Redis]:
    client = redis.Redis.from_url(redis_server.url)
    try:
        yield client
    finally:
        client.close()


@pytest.fixture
def own_server(settings) -> Iterator[RedisServer]:
    """A server of this test's own, which it may stop, kill, restart or pause.

    The app points at it with half-second socket timeouts.
    """
    try:
        binary = find_binary()
    except ServerNotFound:
        pytest.skip("no server binary to start and stop")
    server = RedisServer(binary, extra_args=modes.server_args(binary)).start()
    settings.SEMAPHORE_CONNECTION = f"{server.url}?{OWN_SERVER_TIMEOUTS}"
    try:
        yield server
    finally:
        server.close()


@pytest.fixture
def own_server_client(own_server: RedisServer) -> Iterator[redis.Redis]:
    """A client of the test's own server that is not the app's (whose pool the test must not disturb)."""
    client = redis.Redis.from_url(own_server.url)
    try:
        yield client
    finally:
        client.close()


@pytest.fixture
def keys_lost() -> Iterator[list[dict[str, Any]]]:
    """Every ``semaphore_keys_lost`` sent during the test (the engine's tests and the shared-cache ones)."""
    with recorded(signals.semaphore_keys_lost) as seen:
        yield seen


@pytest.fixture(params=modes.WAYS)
def way(request: pytest.FixtureRequest, redis_client: redis.Redis) -> modes.Way:
    """Each way the engine runs its Lua: a Functions library, or scripts with EVALSHA.

    The session's server gets both ways' users here; a server a test starts
    itself gets them with ``modes.server_args`` (``own_server`` does). The
    test points the app at ``way.url(...)``.
    """
    way = modes.Way(request.param)
    if not way.usable_on(redis_client):
        pytest.skip("this server has no Redis Functions")
    modes.add_users(redis_client)
    return way


# Scopes of a fixture of the suite's that tests share, and so a worker: the module's tests stay together.
SHARED_SCOPES = {"module", "package"}


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The order pytest-xdist hands tests out in (``--dist loadgroup --no-loadscope-reorder``, in addopts):
    the tests marked ``alone`` first, while nothing else runs yet; then the long ones, so that the short ones
    fill the end of the run instead of one long test holding it up: the modules whose tests share a fixture,
    such as a cluster or a browser (each runs on one worker, test after test: the longest stretches), then
    the ``slow`` tests, then the others marked ``processes``. A module whose tests share a module-scoped
    fixture is one group (``xdist_group``): one worker sets it up once, rather than every worker, or again
    each time its tests come back to it. Run in one process, the order changes nothing a test may rely on:
    each test sets up what it needs.

    Last (``trylast``): pytest-django sorts the tests that use the database before the others, as Django's
    runner does, and sorting after it keeps that order only within each of ours (it had put every database
    test, short ones included, before the ``alone`` and the long ones).
    """

    def rank(item: pytest.Item) -> int:
        order = ("alone", "xdist_group", "slow", "processes")
        return next((n for n, name in enumerate(order) if item.get_closest_marker(name)), len(order))

    for item in items:
        definitions = getattr(item, "_fixtureinfo", None)
        fixtures = [d[-1] for d in definitions.name2fixturedefs.values() if d] if definitions else []
        if any(f.scope in SHARED_SCOPES and f.baseid for f in fixtures):  # a plugin's have no baseid
            item.add_marker(pytest.mark.xdist_group(item.nodeid.split("::", 1)[0]))
    items.sort(key=rank)


@pytest.hookimpl(hookwrapper=True, tryfirst=True)
def pytest_runtest_protocol(item: pytest.Item) -> Iterator[None]:
    """Under pytest-xdist, a test marked ``alone`` runs with no other test beside it, on any worker.

    Every other test holds a shared lock while it runs (set-up and teardown included); an ``alone`` test
    holds it exclusively. A turnstile taken before either keeps new tests from starving a waiting
    ``alone`` one. Outermost (``tryfirst``), so the wait is not counted in pytest-timeout's limit.
    """
    if not hasattr(item.config, "workerinput"):
        yield  # one process: every test already runs alone
        return
    # The run's temporary root, shared by its workers (each has its own folder in it); pytest removes it.
    scratch = item.config._tmp_path_factory.getbasetemp().parent  # type: ignore[attr-defined]
    alone = item.get_closest_marker("alone") is not None
    with open(scratch / "turnstile", "a") as turnstile, open(scratch / "running", "a") as running:
        fcntl.flock(turnstile, fcntl.LOCK_EX)
        fcntl.flock(running, fcntl.LOCK_EX if alone else fcntl.LOCK_SH)
        if not alone:
            fcntl.flock(turnstile, fcntl.LOCK_UN)
        try:
            yield
        finally:
            fcntl.flock(running, fcntl.LOCK_UN)
            fcntl.flock(turnstile, fcntl.LOCK_UN)


def pytest_report_header(config: pytest.Config) -> str:
    try:
        from django_semaphore.testing import find_binary

        return f"django-semaphore test server: {os.environ.get('REDIS_URL') or find_binary()}"
    except Exception as exc:  # the header must never stop the run
        return f"django-semaphore test server: {exc}"


def pytest_terminal_summary(terminalreporter: Any) -> None:
    """One line naming each group of skipped tests and why: a skipped browser group is easy to miss in ``-ra``.

    A group is a folder inside a room (``tests/system/browser``, ``tests/system/cluster``) or a module of its own
    (``tests/core/test_core.py``).
    """
    groups: dict[tuple[str, str], int] = {}
    for report in terminalreporter.stats.get("skipped", []):
        group = _group(report.nodeid)
        reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else str(report.longrepr)
        key = (group, reason.removeprefix("Skipped: "))
        groups[key] = groups.get(key, 0) + 1
    if groups:
        parts = [f"{group} ({count}): {reason}" for (group, reason), count in sorted(groups.items())]
        terminalreporter.write_line("Skipped groups: " + "; ".join(parts), yellow=True)


def _group(nodeid: str) -> str:
    path = nodeid.split("::", 1)[0]
    parts = path.split("/")
    return "/".join(parts[:3]) if len(parts) > 3 else path
