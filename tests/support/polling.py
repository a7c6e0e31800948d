"""Waiting in tests for something another thread, process or server does."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

from django_semaphore import BackendUnavailable

T = TypeVar("T")


def wait_until(condition: Callable[[], object], timeout: float = 60.0) -> None:
    """Poll ``condition`` until it holds; fail the test if it does not within ``timeout``.

    The default is for events with no bound of their own (a spawned process set up and in line, a
    server's thread done with a response), which a loaded machine may take tens of seconds to see; a
    test whose point is a bound passes it.
    """
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "condition not met in time"
        time.sleep(0.01)


def eventually(condition: Callable[[], object], timeout: float = 10.0) -> float:
    """Seconds until ``condition`` held; outages meanwhile count as "not yet"."""
    started = time.monotonic()
    while True:
        try:
            if condition():
                return time.monotonic() - started
        except BackendUnavailable:
            pass
        assert time.monotonic() - started < timeout, "condition not met in time"
        time.sleep(0.02)


def answered(call: Callable[[], T], timeout: float = 30.0) -> T:
    """``call()``'s result, asked again while it raises ``BackendUnavailable``: a server that is up, on a loaded
    machine, may miss a test's short socket timeout where no outage is the point."""
    started = time.monotonic()
    while True:
        try:
            return call()
        except BackendUnavailable:
            if time.monotonic() - started > timeout:
                raise
            time.sleep(0.02)
