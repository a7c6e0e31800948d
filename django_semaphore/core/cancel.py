"""Ending a sync acquire's wait from another thread: ``acquire(cancel=event)``.

An asyncio task cancels its acquire by being cancelled; a thread blocked in
``BLPOP`` cannot be interrupted. Setting ``cancel`` moves the caller's
deadline to now, through the clock the acquire flow already takes: the flow
ends as when its wait runs out (it leaves the line, and a permit handed to it
meanwhile goes back), without a change to the flow or its drivers. A watcher
thread wakes a blocked read at once with the leave-and-unblock call the
driver itself uses when Redis's timer is late (``Calls.cancel(unblock=True)``).

Once the event is set, the acquire returns no permit, even one granted in the
same instant: ``drive_cancellable`` gives such a grant back.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from dataclasses import replace
from typing import Any

from . import scripts
from .bounded import Deadline
from .calls import AcquireRequest
from .conf import MAX_SECONDS
from .flow import Driver, acquire_flow
from .replicas import ReplicaConfirmation
from .replies import FULL, AcquireReply

# Beyond any wait (ten years at most): once cancelled, the flow's clock reads past its deadline.
BEYOND_ANY_WAIT = 2.0 * MAX_SECONDS
# How often the watcher looks whether the acquire has ended; a set event wakes it at once.
WATCH_INTERVAL = 0.05


class CancellableClock:
    """The flow's monotonic clock, jumping past every deadline once ``cancel`` is set.

    Its first reading is always true: it is where the flow's deadline is
    measured from, so an event set before the acquire began still ends the
    wait at the next reading.
    """

    def __init__(self, cancel: threading.Event) -> None:
        self.cancel = cancel
        self.started = False

    def __call__(self) -> float:
        now = time.monotonic()
        if self.started and self.cancel.is_set():
            return now + BEYOND_ANY_WAIT
        self.started = True
        return now


@contextmanager
def watching(cancel: threading.Event, unblock: Callable[[], object]) -> Iterator[None]:
    """Run ``unblock`` once if ``cancel`` is set while the block runs, never after it.

    After the block a late ``unblock`` would give back a permit the acquire
    has already returned: the lock makes the block's end wait for one that
    has started, and stops one that has not.
    """
    finished = False
    lock = threading.Lock()

    def watch() -> None:
        while not finished:
            if cancel.wait(WATCH_INTERVAL):
                with lock:
                    if not finished:
                        # The flow notices the cancel at its next step anyway; this only makes it now.
                        with suppress(Exception):
                            unblock()
                return

    watcher = threading.Thread(target=watch, name="django-semaphore-cancel", daemon=True)
    watcher.start()
    try:
        yield
    finally:
        with lock:
            finished = True


def drive_cancellable(
    client: Any,
    request: AcquireRequest,
    confirm: ReplicaConfirmation | None,
    cancel: threading.Event,
    deadline: Deadline,
) -> AcquireReply:
    """``drive`` with a wait that ``cancel`` ends; a grant that raced it goes back."""
    started = time.monotonic()
    flow = acquire_flow(request, CancellableClock(cancel))
    with watching(cancel, lambda: scripts.run(client, request.cancel_call(unblock=True))):
        reply = Driver(client, request, confirm, deadline).drive(flow)
    if cancel.is_set() and reply.granted:
        scripts.run(client, request.release_call())
        reply = replace(reply, code=FULL)
    return replace(reply, waited=time.monotonic() - started)
