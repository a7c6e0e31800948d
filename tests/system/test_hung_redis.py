"""A hung Redis costs a request at most one socket timeout, and ``wait`` bounds the whole call.

Redis stalled (SIGSTOP: it accepts connections and answers nothing, as in a
long fork or a network path that drops packets): every guarded path answers
with its failure policy after at most one socket timeout, a new partition key
included (which records the partition first); ``acquire(wait=w)`` answers
within its wait whatever the socket timeout; and a call abandoned at its
deadline leaves no permit behind when the server, resuming, runs it after all.

The bounds asserted are the ones the library promises (w + 0.25 s, one socket
timeout + 0.25 s); the socket timeouts are chosen far apart from them, so
missing a bound is a matter of seconds, not of scheduling noise. What a loaded
machine keeps the test's process waiting during a call is measured and left
out of the call's time (tests/support/timers.py), so the bound is the
library's, on any machine.
"""

from __future__ import annotations

import asyncio
import gc
import logging
import time
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from typing import Any, TypeVar

import pytest
from django.template import loader
from django.test import Client

from django_semaphore import BackendUnavailable, get_semaphore
from django_semaphore.core.flow import server_clock
from django_semaphore.core.renewal import renewer
from django_semaphore.testing import RedisServer
from django_semaphore.web.responses import TEMPLATE

from ..support.guards import MIDDLEWARE, declare
from ..support.polling import wait_until
from ..support.timers import lateness

pytestmark = pytest.mark.processes  # every test here stalls a server of its own
SLACK = 0.25
T = TypeVar("T")


def use_socket_timeout(settings: Any, server: RedisServer, seconds: float) -> None:
    settings.SEMAPHORE_CONNECTION = f"{server.url}?socket_timeout={seconds}&socket_connect_timeout={seconds}"


@contextmanager
def stalled(server: RedisServer) -> Iterator[None]:
    """The server stopped (SIGSTOP) for the block, resumed by its pid however the block ends."""
    server.freeze()
    try:
        yield
    finally:
        server.thaw()


def timed(call: Callable[[], Any]) -> tuple[float, Any]:
    """Seconds ``call`` took, less what a loaded machine kept this process waiting meanwhile
    (tests/support/timers.py), and what it returned or raised."""
    with lateness() as late:
        started = time.monotonic()
        try:
            outcome = call()
        except BackendUnavailable as error:
            outcome = error
        return time.monotonic() - started - late.seconds, outcome


async def answered(call: Callable[[], Awaitable[T]], within: float = 30.0) -> T:
    """``call()``, tried again while the server, running but on a loaded machine, answers it after a short
    socket timeout: set-up, not what the test times."""
    deadline = time.monotonic() + within
    while True:
        try:
            return await call()
        except BackendUnavailable:
            if time.monotonic() > deadline:
                raise


def warm(name: str, key: str | None = None) -> None:
    """One call while the server answers: scripts loaded, a connection open, the server's clock known."""
    permit = get_semaphore(name, key).acquire(wait=0, auto_renew=False)
    assert permit is not None
    permit.release()


# -- 1. every guarded path: one socket timeout, then the policy ---------------------------------------


@pytest.mark.parametrize(("policy", "status"), [("allow", 200), ("deny", 503)])
@pytest.mark.parametrize("path", ["/surface/header-keyed-quiet/", "/surface/keyed-async/header/"])
def test_a_new_key_on_a_hung_redis_costs_one_socket_timeout(
    own_server: RedisServer, settings, policy: str, status: int, path: str
) -> None:
    timeout = 1.5
    use_socket_timeout(settings, own_server, timeout)
    declare(settings, guarded={"max_partitions": 10, "on_error": policy})
    client = Client()
    assert client.get(path, HTTP_X_API_KEY="known").status_code == 200  # warm: a key seen before
    # The 503 page's template is loaded by the first refusal of a process: not the socket timeout's cost.
    loader.get_template(TEMPLATE)
    with stalled(own_server):
        for key in ("known", "never-seen"):
            took, response = timed(lambda key=key: client.get(path, HTTP_X_API_KEY=key))
            assert response.status_code == status
            assert took <= timeout + SLACK, f"{key}: {took:.2f} s for one socket timeout of {timeout} s"


# -- 2. acquire(wait=w): the wait is a deadline for the whole call --------------------------------------


@pytest.mark.parametrize("key", [None, "a-new-key"], ids=["whole", "new-partition"])
def test_a_wait_ends_the_call_on_a_hung_redis_whatever_the_socket_timeout(
    own_server: RedisServer, settings, key: str | None
) -> None:
    use_socket_timeout(settings, own_server, 4.0)
    declare(settings, guarded={"key": "header:X-Api-Key"} if key else {})
    warm("guarded", "warming" if key else None)
    wait = 0.5
    with stalled(own_server):
        # The first call finds a connection open; the next must make one, on a server that
        # accepts it and answers nothing (its handshake is bounded by the wait too).
        for _ in range(2):
            took, outcome = timed(lambda: get_semaphore("guarded", key).acquire(wait=wait, auto_renew=False))
            assert isinstance(outcome, BackendUnavailable), outcome
            assert took <= wait + SLACK, f"{took:.2f} s for wait={wait}"


@pytest.mark.parametrize("key", [None, "a-new-key"], ids=["whole", "new-partition"])
def test_an_async_wait_ends_the_call_on_a_hung_redis_whatever_the_socket_timeout(
    own_server: RedisServer, settings, key: str | None
) -> None:
    use_socket_timeout(settings, own_server, 4.0)
    declare(settings, guarded={"key": "header:X-Api-Key"} if key else {})
    wait = 0.5

    async def scenario() -> list[tuple[float, Any]]:
        permit = await get_semaphore("guarded", "warming" if key else None).aacquire(wait=0, auto_renew=False)
        assert permit is not None
        await permit.arelease()
        results = []
        with stalled(own_server):
            for _ in range(2):
                with lateness() as late:  # as timed() does
                    started = time.monotonic()
                    try:
                        outcome: Any = await get_semaphore("guarded", key).aacquire(wait=wait, auto_renew=False)
                    except BackendUnavailable as error:
                        outcome = error
                    results.append((time.monotonic() - started - late.seconds, outcome))
        return results

    for took, outcome in asyncio.run(scenario()):
        assert isinstance(outcome, BackendUnavailable), outcome
        assert took <= wait + SLACK, f"{took:.2f} s for wait={wait}"


@pytest.mark.parametrize("asynchronous", [False, True], ids=["sync", "async"])
def test_no_wait_costs_one_socket_timeout_on_a_hung_redis(
    own_server: RedisServer, settings, asynchronous: bool
) -> None:
    timeout = 1.0
    use_socket_timeout(settings, own_server, timeout)
    declare(settings, guarded={"key": "header:X-Api-Key", "max_partitions": 10})
    warm("guarded", "warming")

    def call() -> Any:
        sem = get_semaphore("guarded", "a-new-key")
        if asynchronous:
            return asyncio.run(sem.aacquire(wait=0, auto_renew=False))
        return sem.acquire(wait=0, auto_renew=False)

    with stalled(own_server):
        for _ in range(2):
            took, outcome = timed(call)
            assert isinstance(outcome, BackendUnavailable), outcome
            assert took <= timeout + SLACK, f"{took:.2f} s for one socket timeout of {timeout} s"


# -- 3. a call abandoned at its deadline leaves no permit behind ----------------------------------------


@pytest.mark.parametrize("asynchronous", [False, True], ids=["sync", "async"])
@pytest.mark.parametrize("clock_known", [True, False], ids=["server-clock-known", "first-call-of-the-process"])
def test_an_abandoned_acquire_run_later_by_the_server_leaves_no_permit(
    own_server: RedisServer, settings, monkeypatch: pytest.MonkeyPatch, asynchronous: bool, clock_known: bool
) -> None:
    monkeypatch.setattr("django_semaphore.core.renewal.RETRY_AFTER_ERROR", 0.05)
    use_socket_timeout(settings, own_server, 4.0)
    declare(settings, guarded={"lease": 60})
    sem = get_semaphore("guarded")
    warm("guarded")
    if not clock_known:
        # As in a process's first call: no "not after" bound on the server's clock can go with it.
        monkeypatch.setattr(server_clock, "_offsets", type(server_clock._offsets)())

    def call() -> Any:
        if asynchronous:
            return asyncio.run(sem.aacquire(wait=0.3, auto_renew=False))
        return sem.acquire(wait=0.3, auto_renew=False)

    with stalled(own_server):
        _, outcome = timed(call)
    assert isinstance(outcome, BackendUnavailable), outcome
    # Resumed, the server runs the acquire it buffered (the semaphore is free: it would grant), and the
    # call's clean-up, retried in the background until Redis answers, in whichever order.
    wait_until(lambda: renewer.pending() == 0)
    status = sem.status()
    assert (status.used, status.holder_count) == (0, 0), status
    assert sem.acquire(wait=0, auto_renew=False) is not None


# -- 4. one request, several semaphores: still one socket timeout ---------------------------------------


def stack_rules(settings: Any, path: str, policy: str) -> None:
    """The middleware guarding ``path`` twice: per client (a header) and, behind it, site-wide."""
    declare(settings, gated={"key": "header:X-Api-Key", "on_error": policy}, sitewide={"on_error": policy})
    settings.MIDDLEWARE = [*settings.MIDDLEWARE, MIDDLEWARE]
    settings.SEMAPHORE_MIDDLEWARE_RULES = [
        {"semaphore": "gated", "path": path, "key": "header:X-Api-Key"},
        {"semaphore": "sitewide", "path": path},
    ]


@pytest.mark.parametrize(("policy", "status"), [("allow", 200), ("deny", 503)])
@pytest.mark.parametrize("path", ["/surface/unguarded/", "/surface/unguarded-async/"])
def test_stacked_semaphores_on_a_hung_redis_cost_one_socket_timeout(
    own_server: RedisServer, settings, policy: str, status: int, path: str
) -> None:
    timeout = 1.5
    use_socket_timeout(settings, own_server, timeout)
    stack_rules(settings, path, policy)
    client = Client()
    assert client.get(path, HTTP_X_API_KEY="known").status_code == 200
    with stalled(own_server):
        took, response = timed(lambda: client.get(path, HTTP_X_API_KEY="known"))
    assert response.status_code == status
    assert took <= timeout + SLACK, f"{took:.2f} s for one socket timeout of {timeout} s"


@pytest.mark.django_db  # closing a streamed response closes old database connections
def test_permits_given_back_on_a_hung_redis_cost_one_socket_timeout(own_server: RedisServer, settings) -> None:
    """Three permits (two rules and the view's decorator) held by a stream; Redis hangs before it is closed."""
    timeout = 1.5
    use_socket_timeout(settings, own_server, timeout)
    stack_rules(settings, "/surface/reported-stream/", "allow")
    response = Client().get("/surface/reported-stream/", HTTP_X_API_KEY="streamer")
    assert response.status_code == 200 and get_semaphore("sitewide").status().used == 1
    with stalled(own_server):
        took, _ = timed(response.close)
    assert took <= timeout + SLACK, f"{took:.2f} s for one socket timeout of {timeout} s"
    # Given back once Redis answers again (the releases are retried in the background).
    wait_until(lambda: renewer.pending() == 0 and get_semaphore("sitewide").status().used == 0)
    assert get_semaphore("guarded").status().used == 0


@pytest.mark.django_db  # closing a response sends request_finished, which tidies database connections
def test_a_call_after_a_release_sent_without_waiting_costs_one_socket_timeout(
    own_server: RedisServer, settings
) -> None:
    """The release's answer, read first by the next call on its connection, does not come: that is the
    call's timeout, not one before a second on a new connection to the same hung server."""
    timeout = 1.5
    use_socket_timeout(settings, own_server, timeout)
    declare(settings)
    other = get_semaphore("sitewide").acquire(auto_renew=False)
    assert other is not None and Client().get("/surface/guarded/").status_code == 200  # the way is decided
    response = Client().get("/surface/guarded/")
    with stalled(own_server):
        response.close()  # sent into the hung server
        took, outcome = timed(other.release)
    assert isinstance(outcome, BackendUnavailable)
    assert took <= timeout + SLACK, f"{took:.2f} s for one socket timeout of {timeout} s"
    wait_until(lambda: renewer.pending() == 0 and get_semaphore("guarded").status().used == 0)


# -- 5. asyncio waiters cut off by a hung Redis leave nothing running -----------------------------------


@pytest.mark.parametrize("socket_timeout", [0.5, 4.0], ids=["timeout-within-the-wait", "timeout-past-the-wait"])
def test_asyncio_waiters_whose_wait_ends_while_redis_is_frozen_leave_no_task_behind(
    own_server: RedisServer, settings, caplog: pytest.LogCaptureFixture, socket_timeout: float
) -> None:
    """Waits end in every way a hung Redis allows (in a blocked read, leaving the line, cleaning up)."""
    use_socket_timeout(settings, own_server, socket_timeout)
    declare(settings, guarded={"limit": 1, "lease": 60})
    settings.SEMAPHORE_WAITER_TTL = 10  # each wait one block on the wake list, ended by the waiter at its deadline
    waiters = 12

    async def scenario() -> tuple[list[str], list[dict[str, Any]], list[asyncio.Task[Any]]]:
        loop = asyncio.get_running_loop()
        reported: list[dict[str, Any]] = []
        loop.set_exception_handler(lambda _loop, context: reported.append(context))
        holder = await answered(lambda: get_semaphore("guarded").aacquire(wait=0, auto_renew=False))
        assert holder is not None

        async def wait_in_line(wait: float) -> str:
            # Only a word kept of the outcome: an error kept would keep its frames, and what they hold, from
            # the collector (and so from asyncio's report of a task whose exception nobody retrieved).
            try:
                permit = await get_semaphore("guarded").aacquire(wait=wait)
            except BackendUnavailable:
                return "unavailable"
            return "full" if permit is None else "granted"

        # Waits of 1 to 2.1 s, each ended at its deadline while blocked on the frozen server: by leaving the
        # line (Redis does not answer that either), then by the call's deadline, or the socket timeout.
        tasks = [asyncio.create_task(wait_in_line(1.0 + 0.1 * i)) for i in range(waiters)]
        while (await answered(get_semaphore("guarded").astatus)).waiting < waiters:
            await asyncio.sleep(0.02)
        with stalled(own_server):
            outcomes = await asyncio.gather(*tasks)
            await asyncio.sleep(0.5)  # what the ended calls left running meets the frozen server too

        # The server answers again: clean-ups and reads end (within a socket timeout and a second on a quiet
        # machine). What is looked for is a task that never ends, so a loaded machine is given time.
        def others() -> list[asyncio.Task[Any]]:
            return [task for task in asyncio.all_tasks() if task is not asyncio.current_task()]

        ends_by = time.monotonic() + socket_timeout + 30.0
        await asyncio.sleep(socket_timeout + 1.0)
        while others() and time.monotonic() < ends_by:
            await asyncio.sleep(0.1)
        gc.collect()  # a task whose exception nobody retrieved reports it when collected
        await asyncio.sleep(0)
        left = others()
        await holder.arelease()
        return outcomes, reported, left

    with caplog.at_level(logging.DEBUG, logger="asyncio"):
        outcomes, reported, left = asyncio.run(scenario())
    assert set(outcomes) <= {"full", "unavailable"}, outcomes
    assert reported == [], reported
    assert left == [], left
    assert [r.getMessage() for r in caplog.records if r.name == "asyncio" and r.levelno >= logging.ERROR] == []
    wait_until(lambda: get_semaphore("guarded").status().waiting == 0, timeout=10)
