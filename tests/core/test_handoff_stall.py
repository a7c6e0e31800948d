"""A server stall right after a hand-off never puts a later caller in beside the waiter it handed a permit to.

A release hands its permit to the head of the line on a claim of one waiter TTL.
Redis stalls (``CLIENT PAUSE``, ``SIGSTOP``, another client's slow script) past
that claim just after the grant, before anything the waiter sends next has run;
the next caller's acquire reaches Redis first. A permit acquired directly would
survive that stall (its lease is 60 s): the handed one must too, or its waiter
must not be told it holds it.

The stall is ``CLIENT PAUSE ALL`` on a server of the test's own, started as the
waiter reads its grant; the newcomer's acquire reaches the paused server before
anything the waiter sends, and Redis runs paused clients' commands in the order
it read them, so the worst order is met every time. Each entry counts itself
inside; the answer is 1 at most.
"""

from __future__ import annotations

import asyncio
import threading
import time
from typing import Any

import pytest
import redis

from django_semaphore import Permit, Semaphore, signals
from django_semaphore.core.conf import SemaphoreConfig
from django_semaphore.core.replies import Handover
from django_semaphore.testing import RedisServer

from ..support import modes
from ..support.polling import wait_until
from ..support.recorded import recorded

pytestmark = pytest.mark.processes

STALL_MS = 1500  # past the claim of one waiter TTL (1 s), far within the 60 s lease
# How long the newcomer's acquire gets to reach the paused server before the waiter goes on.
NEWCOMER_FIRST = 0.3


def make(name: str) -> Semaphore:
    return Semaphore(SemaphoreConfig.from_options(name, {"limit": 1, "lease": 60}))


class Inside:
    """Who is inside the guarded section, counted by the entries themselves."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.now = 0
        self.most = 0

    def enter(self) -> None:
        with self._lock:
            self.now += 1
            self.most = max(self.most, self.now)

    def leave(self) -> None:
        with self._lock:
            self.now -= 1


@pytest.mark.parametrize("waiter_style", ["sync", "asyncio"])
def test_a_stall_past_the_claim_right_after_a_hand_off_lets_nobody_in_beside_the_waiter(
    way: modes.Way,
    own_server: RedisServer,
    settings,
    monkeypatch: pytest.MonkeyPatch,
    fast_paths: bool,
    waiter_style: str,
) -> None:
    # Socket timeouts longer than the stall: the calls it holds up are answered after it, not given up on.
    settings.SEMAPHORE_CONNECTION = way.url(own_server.url) + "?socket_timeout=10&socket_connect_timeout=10"
    settings.SEMAPHORE_WAITER_TTL = 1
    name = f"stalled-{way}-{fast_paths}-{waiter_style}"
    inside = Inside()
    newcomer_done = threading.Event()
    got: dict[str, Any] = {}
    admin = redis.Redis.from_url(own_server.url)

    def enter_and_hold(who: str, permit: Permit | None, until: threading.Event | None) -> None:
        got[who] = permit
        if permit is None:
            return
        inside.enter()
        if until is not None:
            until.wait(8)  # the waiter stays inside while the newcomer tries to get in
        else:
            time.sleep(0.2)
        inside.leave()

    def newcomer() -> None:
        permit = make(name).acquire(wait=10)
        enter_and_hold("newcomer", permit, None)
        if permit is not None:
            permit.release()
        newcomer_done.set()

    newcomer_thread = threading.Thread(target=newcomer)
    parse = Handover.parse.__func__  # type: ignore[attr-defined]
    stalled: list[bool] = []

    def stall_as_the_grant_is_read(cls: type[Handover], note: Any) -> Handover | None:
        handover = parse(cls, note)
        if handover is not None and not stalled:
            stalled.append(True)
            admin.execute_command("CLIENT", "PAUSE", STALL_MS, "ALL")
            newcomer_thread.start()
            time.sleep(NEWCOMER_FIRST)  # the newcomer's acquire reaches the paused server first
        return handover

    def waiter() -> None:
        sem = make(name)
        if waiter_style == "sync":
            permit = sem.acquire(wait=10)
            enter_and_hold("waiter", permit, newcomer_done)
            if permit is not None:
                permit.release()
        else:

            async def run() -> None:
                permit = await sem.aacquire(wait=10)
                await asyncio.to_thread(enter_and_hold, "waiter", permit, newcomer_done)
                if permit is not None:
                    await permit.arelease()

            asyncio.run(run())

    holder = make(name).acquire(auto_renew=False)
    assert holder is not None
    waiter_thread = threading.Thread(target=waiter)
    try:
        with recorded(signals.semaphore_lost) as lost:
            waiter_thread.start()
            wait_until(lambda: make(name).status().waiting == 1)
            monkeypatch.setattr(Handover, "parse", classmethod(stall_as_the_grant_is_read))
            holder.release()  # handed to the waiter, then the stall
            waiter_thread.join(20)
            if newcomer_thread.ident is not None:
                newcomer_thread.join(20)
        assert stalled, "the waiter was never handed the permit"
        assert got.get("waiter") is not None and got.get("newcomer") is not None
        assert inside.most == 1, f"{inside.most} inside a limit of 1 (permits lost meanwhile: {lost})"
        wait_until(lambda: make(name).status().used == 0, timeout=5)
    finally:
        newcomer_done.set()
        admin.execute_command("CLIENT", "UNPAUSE")
        admin.close()
