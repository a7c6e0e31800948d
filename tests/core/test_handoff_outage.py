"""A hand-off whose confirming renewal cannot reach Redis as it was: never a permit on its claim alone.

A release hands its permit to the head of the line on a claim of one waiter
TTL; the waiter renews it to its full lease before ``acquire()`` returns.
Here the server goes away between the two, the moment the waiter reads its
grant: SIGKILLed and started again on its AOF (the claim kept), or on nothing
(the claim forgotten), or still down when the renewal is sent. Whatever the
waiter gets is either ``BackendUnavailable`` (the failure policy) or a permit
held on the server for its full lease; never one whose only deadline is the
claim, which the renewal thread could not extend past a restart and would
then report lost a second after the caller was told it holds it. Either way
the permit comes back.
"""

from __future__ import annotations

import asyncio
import shutil
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from django_semaphore import BackendUnavailable, Permit, Semaphore
from django_semaphore.core.conf import SemaphoreConfig
from django_semaphore.core.replies import Handover
from django_semaphore.testing import RedisServer, find_binary

from ..support import modes
from ..support.polling import answered, eventually, wait_until

pytestmark = pytest.mark.processes  # kills and restarts a server of its own

LEASE = 4.0
WAITER_TTL = 1.0


@pytest.fixture
def aof_server(settings) -> Iterator[RedisServer]:
    """A server of the test's own whose every write is on disk before it is answered (it may be SIGKILLed)."""
    binary = find_binary()
    extra = [*modes.server_args(binary), "--appendonly", "yes", "--appendfsync", "always"]
    server = RedisServer(binary, extra_args=extra).start()
    settings.SEMAPHORE_CONNECTION = f"{server.url}?socket_timeout=0.5&socket_connect_timeout=0.5"
    settings.SEMAPHORE_WAITER_TTL = WAITER_TTL
    try:
        yield server
    finally:
        server.close()


def make(name: str) -> Semaphore:
    return Semaphore(SemaphoreConfig.from_options(name, {"limit": 1, "lease": LEASE}))


def restart(server: RedisServer, *, keep: bool) -> None:
    server.crash()
    if not keep:
        for path in Path(server.data_dir).iterdir():
            if path.name.startswith(("appendonly", "dump")):
                shutil.rmtree(path) if path.is_dir() else path.unlink()
    server.start()


@pytest.mark.parametrize("style", ["sync", "asyncio"])
@pytest.mark.parametrize("fault", ["restart-keeping", "restart-forgetting", "down"])
def test_a_hand_off_whose_confirming_renewal_meets_a_restart_never_reports_a_permit_on_its_claim(
    aof_server: RedisServer, monkeypatch: pytest.MonkeyPatch, style: str, fault: str
) -> None:
    name = f"confirm-{fault}-{style}"
    parse = Handover.parse.__func__  # type: ignore[attr-defined]
    read, faulted = threading.Event(), threading.Event()

    def held_up_at_the_grant(cls: type[Handover], note: Any) -> Handover | None:
        handover = parse(cls, note)
        if handover is not None and not read.is_set():
            read.set()
            faulted.wait(30)  # the test's thread breaks the server now (a server restarted from here dies with us)
        return handover

    got: list[Any] = []

    def waiter() -> None:
        asked_until = time.monotonic() + 30
        while True:
            try:
                if style == "sync":
                    got.append(make(name).acquire(wait=10))
                else:
                    got.append(asyncio.run(make(name).aacquire(wait=10)))
                return
            except BackendUnavailable as error:
                if read.is_set() or time.monotonic() > asked_until:
                    got.append(error)
                    return
                # Before the grant: a loaded machine outran the 0.5 s socket timeout, not the outage under test.

    holder = answered(lambda: make(name).acquire(auto_renew=False))
    assert holder is not None
    thread = threading.Thread(target=waiter)
    thread.start()
    try:
        wait_until(lambda: answered(lambda: make(name).status()).waiting == 1)
        monkeypatch.setattr(Handover, "parse", classmethod(held_up_at_the_grant))
        holder.release()  # handed to the waiter on its claim
        assert read.wait(10)
        if fault == "down":
            aof_server.crash()
        else:
            restart(aof_server, keep=fault == "restart-keeping")
    finally:
        faulted.set()
        thread.join(30)
    monkeypatch.undo()
    if fault == "down":
        aof_server.start()
    (outcome,) = got
    if isinstance(outcome, Permit):
        # Its lease as the server last told it: the full lease from the renewal, not the claim.
        assert outcome.expires_at - outcome.acquired_at > LEASE - 1, outcome.expires_at - outcome.acquired_at
        time.sleep(WAITER_TTL + 0.5)  # past the claim: only the full lease keeps it now
        assert not outcome.lost and outcome.is_held()
        outcome.release()
    else:
        assert isinstance(outcome, BackendUnavailable), outcome
    if fault == "down":
        assert isinstance(outcome, BackendUnavailable), outcome  # nothing could confirm it
    eventually(lambda: make(name).status().used == 0, timeout=LEASE + 5)
