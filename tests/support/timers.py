"""How long a loaded machine kept this process waiting: the margin a bound on a call's duration is given.

A test that holds a call to a bound of its own (``acquire(wait=w)`` answers
within ``w`` + 0.25 s) times it on this machine, where other processes may
keep this one off the CPU for longer than the slack. A thread of the test's
own, waking every few milliseconds while the call runs, is woken late by as
much as the scheduler keeps any runnable thread of the process waiting: the
sum of its delays is what the machine took from the call, and the call is
held to its bound plus that, and to nothing looser. The ticker is an OS
thread, not a task of the event loop under test: a call that blocked the loop
would not delay it, so it excuses nothing the library does. On a quiet
machine the sum is a few milliseconds; a library that overran its bound by a
socket timeout would still miss it by seconds.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

# Seconds between the ticker's wake-ups: short against the slacks (0.25 s), long against the GIL's switch
# interval (5 ms), which a thread of the test busy in Python code may add to one wake-up.
STEP = 0.02


class Lateness:
    """Seconds the ticker woke after its due times, summed (grows while the block runs)."""

    def __init__(self) -> None:
        self.seconds = 0.0


@contextmanager
def lateness() -> Iterator[Lateness]:
    """While the block runs, the summed lateness of a thread that sleeps ``STEP`` at a time; final on exit."""
    late = Lateness()
    done = threading.Event()

    def ticker() -> None:
        while not done.is_set():
            started = time.monotonic()
            time.sleep(STEP)
            late.seconds += max(time.monotonic() - started - STEP, 0.0)

    thread = threading.Thread(target=ticker, daemon=True)
    thread.start()
    try:
        yield late
    finally:
        done.set()
        thread.join()
