"""Fault injection over real HTTP: Redis crashes or hangs while a live server takes traffic.

pytest-django's ``live_server`` (a threaded WSGI server on a loopback port)
serves a guarded sync view and a guarded async one to a few client threads,
while the Redis server the test started itself is SIGKILLed and restarted, or
paused for longer than the socket timeout. No request ever gets a 500: the
semaphore's ``on_error`` decides (``allow`` runs the request and counts it,
``deny`` answers 503 with Retry-After), a hung Redis costs a request about
the socket timeout rather than the length of the hang, and guarded requests
get permits again on their own once Redis is back.
"""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.request
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass

import pytest
import redis

from django_semaphore import get_semaphore, outcomes
from django_semaphore.testing import RedisServer

from ..conftest import OWN_SERVER_SOCKET_TIMEOUT
from ..support.guards import declare
from ..support.load import Workers
from ..support.polling import eventually

PAUSE_MS = 3000
# Generous: the socket timeout times redis-py's retries, plus a loaded machine;
# still well under the pause, which is what must not bound a request.
SLOWEST_REQUEST = 2.5
# A killed server refuses connections at once, so no request waits on it: this bound is only that none hangs
# (beside `make bench`, at a load of 30 on two CPUs, the slowest took 3.2 s).
HUNG_REQUEST = 10.0
URLS = ("/surface/reported/", "/surface/reported-async/")
ERROR_OUTCOME = {"allow": "error_allowed", "deny": "error_denied"}

# live_server shares the test database; outages of real servers: CI runs these in one cell
pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.processes]


@dataclass(frozen=True)
class Reply:
    status: int
    outcome: str | None  # the view's report (200), or "error_denied" / "full" (503)
    retry_after: str | None
    started: float
    seconds: float


def fetch(url: str) -> Reply:
    started = time.monotonic()
    request = urllib.request.Request(url, headers={"Accept": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            status, body, retry = response.status, response.read(), None
    except urllib.error.HTTPError as error:
        status, body, retry = error.code, error.read(), error.headers.get("Retry-After")
    seconds = time.monotonic() - started
    outcome = None
    if status == 200:
        outcome = json.loads(body)["outcome"]
    elif status == 503:
        detail = json.loads(body).get("detail", "")
        outcome = "error_denied" if "unavailable" in detail else "full"
    return Reply(status, outcome, retry, started, seconds)


class Traffic(Workers):
    """Client threads requesting the guarded views in a loop, keeping every reply."""

    join_timeout = 40.0

    def __init__(self, base_url: str, threads: int = 3) -> None:
        super().__init__(threads)
        self.base_url = base_url
        self.replies: list[Reply] = []

    def _run(self, index: int) -> None:
        turn = index
        while not self.stop.is_set():
            reply = fetch(self.base_url + URLS[turn % len(URLS)])
            turn += 1
            with self.lock:
                self.replies.append(reply)
            time.sleep(0.01)

    def since(self, moment: float) -> list[Reply]:
        with self.lock:
            return [reply for reply in self.replies if reply.started >= moment]

    def until(self, condition: Callable[[], bool], timeout: float = 20.0) -> float:
        """Seconds until ``condition`` held."""
        started = time.monotonic()
        while not condition():
            assert time.monotonic() - started < timeout, "traffic did not get there in time"
            time.sleep(0.02)
        return time.monotonic() - started


def count(replies: list[Reply], outcome: str) -> int:
    return sum(reply.outcome == outcome for reply in replies)


def first_acquired(traffic: Traffic, moment: float) -> float:
    """Seconds from ``moment`` until a request started after it had a permit."""
    return min(r.started + r.seconds for r in traffic.since(moment) if r.outcome == "acquired") - moment


@pytest.fixture(autouse=True)
def fresh_outcomes() -> None:
    outcomes.reset()


def check_replies(replies: list[Reply], policy: str) -> None:
    """No 500s; the policy decided every request Redis could not guard; everything was counted."""
    statuses = Counter(reply.status for reply in replies)
    assert set(statuses) <= ({200} if policy == "allow" else {200, 503}), statuses
    assert {reply.outcome for reply in replies} <= {"acquired", ERROR_OUTCOME[policy]}
    if policy == "deny":
        assert all(reply.retry_after == "5" for reply in replies if reply.status == 503)
    counted = outcomes.counts()["guarded"]
    assert counted.get("acquired", 0) == count(replies, "acquired")
    assert counted[ERROR_OUTCOME[policy]] == count(replies, ERROR_OUTCOME[policy])


@pytest.mark.parametrize("policy", ["allow", "deny"])
def test_sigkill_and_restart_under_http_load(live_server, settings, own_server: RedisServer, policy: str) -> None:
    declare(settings, guarded={"limit": 5, "on_error": policy})
    error = ERROR_OUTCOME[policy]
    with Traffic(live_server.url) as traffic:
        traffic.until(lambda: count(traffic.since(0), "acquired") >= 6)
        own_server.crash()
        down = time.monotonic()
        traffic.until(lambda: count(traffic.since(down), error) >= 6)
        own_server.start()  # the same port, empty: no scripts, no permits
        back = time.monotonic()
        traffic.until(lambda: count(traffic.since(back), "acquired") >= 4)
    recovered = first_acquired(traffic, back)
    replies = traffic.replies
    print(
        f"on_error={policy}: guarded again {recovered:.2f} s after the restart; {Counter(r.outcome for r in replies)}"
    )
    check_replies(replies, policy)
    assert recovered < 10
    assert max(reply.seconds for reply in replies) < HUNG_REQUEST
    # Permits held at the crash died with the data; every later one was given back (once its response was sent).
    eventually(lambda: get_semaphore("guarded").status().used == 0, timeout=5)


@pytest.mark.parametrize("policy", ["allow", "deny"])
def test_pause_longer_than_the_socket_timeout_under_http_load(
    live_server, settings, own_server: RedisServer, policy: str
) -> None:
    # A short lease: an acquire that Redis ran after its caller had timed out
    # leaves a holder nobody knows about, and only its lease gives it back.
    declare(settings, guarded={"limit": 5, "lease": 1, "on_error": policy})
    error = ERROR_OUTCOME[policy]
    with redis.Redis.from_url(own_server.url) as admin, Traffic(live_server.url) as traffic:
        traffic.until(lambda: count(traffic.since(0), "acquired") >= 6)
        # CLIENT UNPAUSE would itself wait out a pause of every client: let it end.
        admin.client_pause(PAUSE_MS, all=True)
        paused = time.monotonic()
        back = paused + PAUSE_MS / 1000
        traffic.until(lambda: count(traffic.since(paused), error) >= 3, timeout=PAUSE_MS / 1000)
        traffic.until(lambda: count(traffic.since(back), "acquired") >= 4)
    recovered = first_acquired(traffic, back)
    # The answers given while Redis still hung were bounded by the socket timeout, not the pause.
    during = [r for r in traffic.since(paused) if r.started + r.seconds < back]
    replies = traffic.replies
    slowest = max(reply.seconds for reply in during if reply.outcome == error)
    print(
        f"on_error={policy}: slowest answer during the pause {slowest:.2f} s "
        f"(socket timeout {OWN_SERVER_SOCKET_TIMEOUT} s); "
        f"guarded again {recovered:.2f} s after it ended; {Counter(r.outcome for r in replies)}"
    )
    check_replies(replies, policy)
    assert slowest < SLOWEST_REQUEST < PAUSE_MS / 1000
    assert recovered < 10
    eventually(lambda: get_semaphore("guarded").status().used == 0, timeout=5)
