"""With no traffic, the background thread stops calling Redis once nothing it would mend is left (issue 30, item 6).

A process whose ACL user Redis refuses kept calling it from the background:
every clean-up twice a second for its lease, a held permit's renewal twice a
second for good, the metrics' counts once per flush interval for good, and
that last one reloaded the library seconds after an operator's ``FUNCTION
FLUSH``. Each test here runs a server of its own with an ACL user for the app
and counts, on the server, the script calls and the ``ACL LOG`` entries the
app makes while it has no traffic, over a window measured on the server's
clock: they must stop growing once the permits' leases, the clean-ups'
windows and the outage watch (one ``SEMAPHORE_OUTAGE_LOG_INTERVAL`` after the
last call that needed Redis) are over. The intervals are the settings'
own, made short.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import redis
from django.test import Client

from django_semaphore import BackendUnavailable, get_semaphore
from django_semaphore.core.renewal import renewer
from django_semaphore.core.tally import tally
from django_semaphore.signals import semaphore_lost
from django_semaphore.testing import RedisServer, ServerNotFound, find_binary

from ..support import modes
from ..support.guards import declare
from ..support.recorded import recorded

APP_USER, APP_PASSWORD = "quiet-app", "quiet-pw"
# Every way a script reaches the server, and the library's loading: the test itself sends none of them.
SCRIPT_COMMANDS = ("fcall", "fcall_ro", "evalsha", "evalsha_ro", "eval", "eval_ro", "function|load")
# An idle window, on the server's clock: many times every background interval the test sets (five leases, fifty
# flushes, two and a half outage-watch intervals).
IDLE_WINDOW = 10.0
# How long the process may take to have nothing left to mend (leases, clean-ups, the watch), at most.
SETTLE_WITHIN = 60.0


@pytest.fixture
def acl_server() -> Iterator[RedisServer]:
    """A server of this test's own (it changes the ACL, flushes functions), with an app user allowed everything."""
    try:
        binary = find_binary()
    except ServerNotFound:
        pytest.skip("no server binary to start")
    server = RedisServer(binary).start()
    try:
        yield server
    finally:
        server.close()


@pytest.fixture
def admin(acl_server: RedisServer) -> Iterator[redis.Redis]:
    client = redis.Redis.from_url(acl_server.url)
    rules = os.environ.get("SEMAPHORE_TEST_ACL", "").split()  # CI's cell denied Functions: the app user too
    client.execute_command("ACL", "SETUSER", APP_USER, "reset", "on", f">{APP_PASSWORD}", "~*", "&*", "+@all", *rules)
    try:
        yield client
    finally:
        client.close()


@pytest.fixture
def app(settings: Any, acl_server: RedisServer, admin: redis.Redis) -> None:
    """The app connects as the app user; every background interval the library lets a site set is short."""
    url = f"redis://{APP_USER}:{APP_PASSWORD}@127.0.0.1:{acl_server.port}/0"
    settings.SEMAPHORE_CONNECTION = f"{url}?socket_timeout=2&socket_connect_timeout=2"
    settings.SEMAPHORE_METRICS_FLUSH_INTERVAL = 0.2
    settings.SEMAPHORE_OUTAGE_LOG_INTERVAL = 4
    declare(settings, guarded={"limit": 1, "lease": 2, "on_error": "allow"}, sitewide={"limit": 5, "lease": 2})


def server_seconds(admin: redis.Redis) -> float:
    seconds, micros = admin.time()
    return seconds + micros / 1_000_000


def script_calls(admin: redis.Redis) -> int:
    """Calls of the script commands the server has seen, run, failed or refused."""
    stats = admin.info("commandstats")
    fields = ("calls", "rejected_calls", "failed_calls")
    return sum(int(stats.get(f"cmdstat_{name}", {}).get(field, 0)) for name in SCRIPT_COMMANDS for field in fields)


def acl_denials(admin: redis.Redis) -> int:
    """What ``ACL LOG`` counts (an entry counts its repeats)."""
    return sum(int(entry.get("count", 1)) for entry in admin.acl_log(count=1000))


def library_loads(admin: redis.Redis) -> int:
    stats = admin.info("commandstats").get("cmdstat_function|load", {})
    return int(stats.get("calls", 0)) + int(stats.get("rejected_calls", 0))


def settle(done: Callable[[], bool]) -> float:
    """Wait until ``done()`` (the process says nothing is left), at most SETTLE_WITHIN; the seconds it took."""
    started = time.monotonic()
    while not done() and time.monotonic() - started < SETTLE_WITHIN:
        time.sleep(0.1)
    return time.monotonic() - started


def idle_growth(admin: redis.Redis, seconds: float) -> tuple[int, int]:
    """How many script calls and ACL denials reach the server over ``seconds`` of its own clock."""
    calls, denials = script_calls(admin), acl_denials(admin)
    until = server_seconds(admin) + seconds
    while server_seconds(admin) < until:
        time.sleep(0.25)
    return script_calls(admin) - calls, acl_denials(admin) - denials


def outage_records(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [record.getMessage() for record in caplog.records if record.name == "django_semaphore.outages"]


def stopped_looking(caplog: pytest.LogCaptureFixture) -> bool:
    return any("so it stops looking" in message for message in outage_records(caplog))


@pytest.mark.slow
def test_a_refused_process_stops_calling_redis_once_nothing_is_left_to_mend(
    app: None, admin: redis.Redis, caplog: pytest.LogCaptureFixture
) -> None:
    held = get_semaphore("guarded").acquire()  # renewed in the background every third of its 2 s lease
    released = get_semaphore("sitewide").acquire(auto_renew=False)
    assert held is not None and released is not None
    admin.execute_command("ACL", "SETUSER", APP_USER, "-time")  # every script reads the server's clock
    admin.acl_log_reset()
    before = script_calls(admin)
    with caplog.at_level(logging.INFO, logger="django_semaphore"), recorded(semaphore_lost) as lost:
        client = Client()
        for _ in range(5):  # refused requests: let through (on_error="allow"), counted, their acquires cleaned up
            response = client.get("/surface/reported/", headers={"Accept": "application/json"})
            assert response.json()["outcome"] == "error_allowed"
        with pytest.raises(BackendUnavailable):
            released.release()  # retried in the background until its lease would have ended
        took = settle(lambda: bool(lost) and renewer.pending() == 0 and stopped_looking(caplog))
        settled = script_calls(admin) - before
        calls, denials = idle_growth(admin, IDLE_WINDOW)
    print(
        f"refused: {settled} script calls and {acl_denials(admin)} ACL denials until the process had nothing left "
        f"to mend ({took:.1f} s); then {calls} calls and {denials} denials in {IDLE_WINDOW:g} s of server time"
    )
    for message in outage_records(caplog):
        print("  ", message)
    assert (calls, denials) == (0, 0)
    # The held permit's renewals stopped with its lease: it is lost, and says so.
    assert [event["reason"] for event in lost] == ["expired"] and held.lost
    assert tally.pending()["attempts"]  # the counts wait for a call that Redis answers, not a timer


@pytest.mark.slow
@pytest.mark.parametrize("refused", [False, True], ids=["answering", "refused"])
def test_an_idle_process_never_reloads_the_library_an_operator_flushed(
    app: None, admin: redis.Redis, settings: Any, caplog: pytest.LogCaptureFixture, refused: bool
) -> None:
    with redis.Redis.from_url(settings.SEMAPHORE_CONNECTION) as app_client:
        if not modes.has_functions(app_client):
            pytest.skip("no Redis Functions for the app's user on this server")
    settings.SEMAPHORE_OUTAGE_LOG_INTERVAL = 30  # the outage watch still looks when the operator flushes
    sem = get_semaphore("guarded")
    sem.acquire(auto_renew=False).release()  # the library is loaded
    if refused:
        admin.execute_command("ACL", "SETUSER", APP_USER, "-time")
    with caplog.at_level(logging.INFO, logger="django_semaphore"):
        client = Client()
        for _ in range(5):
            response = client.get("/surface/reported/", headers={"Accept": "application/json"})
            assert response.json()["outcome"] == ("error_allowed" if refused else "acquired")
        # No traffic any more: the clean-ups of the refused acquires end with their windows (a lease), the
        # metrics' counts are written (or kept, refused); the outage watch may still be looking.
        settle(lambda: renewer.pending() == 0 and (refused or not tally.pending()["attempts"]))
        admin.function_flush()
        loads = library_loads(admin)
        calls, _ = idle_growth(admin, 10.0)
        assert (library_loads(admin), admin.function_list()) == (loads, []), f"reloaded ({calls} script calls)"
        # Refused, then the library gone: whether the refusal is over, only a call that loads it can tell.
        gone = [message for message in outage_records(caplog) if "library is gone" in message]
        assert len(gone) == refused and all("so it stops looking" in message for message in gone), gone
        # The next real call loads it again.
        if refused:
            with pytest.raises(BackendUnavailable):
                sem.acquire(auto_renew=False)
        else:
            sem.acquire(auto_renew=False).release()
    assert library_loads(admin) == loads + 1 and len(admin.function_list()) == 1
