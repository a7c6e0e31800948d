"""A wait that ran its course, full, is a refusal even when leaving the line outlasts the call.

An acquire that waits has its wait and 0.2 s more for leaving the line
(core/bounded.py ``LEAVING``). Redis answered the whole wait (the line was
full), but a loaded client or a paused server can take longer than that to
confirm the leaving; the call used to end there in an outage, which a guard
with ``on_error="allow"`` lets through unguarded. Here the server pauses
writes (``CLIENT PAUSE ... WRITE``, as a failover does) from inside the wait
until well past the call's deadline: the call ends by its deadline, refused,
and its place in line is given back once the server answers again (by the
background, which retries until Redis confirms).
"""

from __future__ import annotations

import asyncio
import os
import resource
import sys
import threading
import time
import types

import pytest
import redis

from django_semaphore import Attempt, BackendUnavailable, Permit, Semaphore
from django_semaphore.core import bounded
from django_semaphore.core.bounded import Deadline
from django_semaphore.core.calls import AcquireOptions
from django_semaphore.core.conf import SemaphoreConfig
from django_semaphore.core.connection import aclient, get_client
from django_semaphore.core.flow import LEAVE, Driver, first_acquire
from django_semaphore.core.replies import FULL, AcquireReply
from django_semaphore.core.waits import _replied
from django_semaphore.testing import RedisServer

from ..support.polling import eventually, wait_until

WAIT = 1.0
PAUSE_MS = 2500


@pytest.fixture
def patient_server(own_server: RedisServer, settings) -> RedisServer:
    """The test's own server; a socket timeout and heartbeats longer than the wait: the wait is one ``BLPOP``.

    Its timer ticks every 10 ms (``hz 100``), so the wait's timeout is answered well within the 0.2 s the
    call has after it, also on a loaded machine: a wait Redis did not answer in that time is an outage."""
    settings.SEMAPHORE_CONNECTION = f"{own_server.url}?socket_timeout=5&socket_connect_timeout=5"
    settings.SEMAPHORE_WAITER_TTL = 30
    admin = redis.Redis.from_url(own_server.url)
    admin.config_set("hz", 100)
    admin.close()
    return own_server


def held_full(name: str) -> tuple[Semaphore, Permit]:
    """A semaphore of limit 1, and the permit that fills it for the test's whole time."""
    sem = Semaphore(SemaphoreConfig.from_options(name, {"limit": 1}))
    holder = sem.acquire(lease=30, auto_renew=False)
    assert holder is not None
    return sem, holder


@pytest.mark.parametrize("style", ["sync", "asyncio"])
def test_a_full_wait_whose_leaving_outlasts_the_call_is_refused(
    patient_server: RedisServer, own_server_client: redis.Redis, style: str
) -> None:
    sem, holder = held_full(f"slow-leaving-{style}")
    outcome: list[Attempt | BaseException] = []
    timing: list[float] = []
    started = time.monotonic()

    def wait_in_line() -> None:
        try:
            outcome.append(sem.attempt(wait=WAIT) if style == "sync" else asyncio.run(sem.aattempt(wait=WAIT)))
        except BaseException as error:  # the outage it used to be, kept for the assertion's message
            outcome.append(error)
        timing.append(time.monotonic() - started)

    waiter = threading.Thread(target=wait_in_line)
    waiter.start()
    try:
        wait_until(lambda: sem.status().waiting == 1, timeout=WAIT / 2)
        paused_at = time.monotonic()
        own_server_client.execute_command("CLIENT", "PAUSE", PAUSE_MS, "WRITE")
    finally:
        waiter.join()
    # The pause began inside the wait and ends after the call's deadline (its wait and LEAVING).
    assert paused_at - started < WAIT
    [attempt] = outcome
    assert not isinstance(attempt, BackendUnavailable), attempt
    assert isinstance(attempt, Attempt) and attempt.permit is None and attempt.limit == 1, attempt
    assert timing[0] < WAIT + 0.2 + 0.3, timing  # ended by its deadline, with a loaded machine's slack
    # Once writes resume, the place is given back and the holder's release hands nothing to a ghost.
    eventually(lambda: sem.status().waiting == 0, timeout=PAUSE_MS / 1000 + 10)
    assert holder.release() is True
    again = sem.acquire()
    assert again is not None
    again.release()


def _queued_then_leaving(request, paused: redis.Redis):  # type: ignore[no-untyped-def]
    """Queued at the first reply, then the line left while the server pauses writes.

    The public call above leaves through its wait's own unblocking when
    Redis's timer is late; this is the flow's own leaving, after a wait Redis
    ended on time (or a grant that came too late)."""
    reply = AcquireReply.parse((yield first_acquire(request)), 0.0)
    paused.execute_command("CLIENT", "PAUSE", PAUSE_MS, "WRITE")
    yield LEAVE
    return reply.finished(0.0, False, FULL)


@pytest.mark.parametrize("style", ["sync", "asyncio"])
def test_the_flows_own_leaving_that_outlasts_the_call_is_refused(
    patient_server: RedisServer, own_server_client: redis.Redis, style: str
) -> None:
    sem, holder = held_full(f"slow-flow-leaving-{style}")
    request = AcquireOptions(wait=WAIT).request(sem.config, sem.calls)
    started = time.monotonic()
    if style == "sync":
        deadline = Deadline.after(0.5)
        reply = Driver(get_client(), request, deadline=deadline).drive(_queued_then_leaving(request, own_server_client))
    else:

        async def driven() -> AcquireReply:
            deadline = Deadline.after(0.5)
            driver = Driver(await aclient(), request, deadline=deadline)
            return await bounded.by(deadline, driver.adrive(_queued_then_leaving(request, own_server_client)))

        reply = asyncio.run(driven())
    assert reply.code == FULL and time.monotonic() - started < 0.5 + 0.3
    assert sem.status().waiting == 1  # still in line while writes are paused: the background gives it back
    eventually(lambda: sem.status().waiting == 0, timeout=PAUSE_MS / 1000 + 10)
    assert holder.release() is True


@pytest.mark.skipif(sys.version_info < (3, 11), reason="3.10's wait_for raises any other cancel again itself")
def test_a_cancel_from_elsewhere_just_after_the_deadline_is_not_taken_for_it(
    patient_server: RedisServer, own_server_client: redis.Redis
) -> None:
    """The request's client goes away after the deadline passed, but before the loop ran the call's own
    timeout (another request held the loop across it): that cancel is not the deadline's, and goes on."""
    sem, holder = held_full("slow-leaving-cancelled")
    request = AcquireOptions(wait=WAIT).request(sem.config, sem.calls)

    async def scenario() -> object:
        deadline = Deadline.after(0.5)
        driver = Driver(await aclient(), request, deadline=deadline)
        call = asyncio.ensure_future(
            bounded.by(deadline, driver.adrive(_queued_then_leaving(request, own_server_client)))
        )

        async def client_goes_away() -> None:
            await asyncio.sleep(max(deadline.left() - 0.05, 0.0))
            time.sleep(max(deadline.left(), 0.0) + 0.02)  # the loop held across the deadline
            call.cancel()

        gone = asyncio.ensure_future(client_goes_away())
        try:
            return await call
        except asyncio.CancelledError:
            return "cancelled"
        finally:
            await gone

    try:
        outcome = asyncio.run(scenario())
        assert outcome == "cancelled", outcome
    finally:
        eventually(lambda: sem.status().waiting == 0, timeout=PAUSE_MS / 1000 + 10)
        holder.release()


def test_a_leaving_confirmed_just_before_the_deadline_on_a_busy_loop_is_a_refusal(
    patient_server: RedisServer, own_server_client: redis.Redis
) -> None:
    """Redis's timer a second coarse, so the driver unblocks its own last wait; writes paused from inside the
    wait resume 50 ms before the deadline, while another request holds the loop for 100 ms across it."""
    own_server_client.config_set("hz", 1)
    sem, holder = held_full("slow-leaving-busy-loop")

    async def scenario() -> object:
        started = time.monotonic()
        call = asyncio.ensure_future(sem.aattempt(wait=WAIT))
        await asyncio.sleep(WAIT / 2)
        own_server_client.execute_command("CLIENT", "PAUSE", 10_000, "WRITE")
        await asyncio.sleep(max(started + WAIT + 0.15 - time.monotonic(), 0.0))
        own_server_client.execute_command("CLIENT", "UNPAUSE")
        time.sleep(0.1)
        try:
            return await call
        except BaseException as error:  # the outage it must not be, kept for the message
            return error

    try:
        outcome = asyncio.run(scenario())
        assert isinstance(outcome, Attempt) and outcome.permit is None, outcome
    finally:
        own_server_client.config_set("hz", 10)
        eventually(lambda: sem.status().waiting == 0, timeout=10)
        holder.release()


def test_a_reply_not_read_yet_is_seen_in_the_stream_or_the_socket_whatever_its_descriptor() -> None:
    """How the asyncio leaving tells Redis answered while the loop was busy; select() would have failed on a
    socket whose descriptor is past 1024, as a busy worker's are."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard != resource.RLIM_INFINITY and hard < 2048:
        pytest.skip("cannot open enough descriptors here")
    resource.setrlimit(resource.RLIMIT_NOFILE, (2048, hard))
    filler = [os.open(os.devnull, os.O_RDONLY) for _ in range(1100)]

    async def seen() -> list[bool]:
        answering: list[asyncio.StreamWriter] = []  # kept open: a writer collected closes, and EOF reads as data

        def answer(_reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            answering.append(writer)
            writer.write(b"+OK\r\n")

        server = await asyncio.start_server(answer, "127.0.0.1", 0)
        reader, writer = await asyncio.open_connection("127.0.0.1", server.sockets[0].getsockname()[1])
        connection = types.SimpleNamespace(_reader=reader, _writer=writer)
        assert writer.get_extra_info("socket").fileno() > 1024
        looks = []
        time.sleep(0.2)  # the loop busy: the reply waits in the socket
        looks.append(_replied(connection))
        await asyncio.sleep(0.2)  # the loop read it into the stream, where the read has not taken it
        looks.append(_replied(connection))
        await reader.readline()
        looks.append(_replied(connection))
        for opened in (writer, *answering):
            opened.close()
        server.close()
        return looks

    try:
        assert asyncio.run(seen()) == [True, True, False]
    finally:
        for descriptor in filler:
            os.close(descriptor)
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
