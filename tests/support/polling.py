"""Waiting in tests for something another thread, process or server does."""

from __future__ import annotations

import time
from collections.abc import Callable

from django_semaphore import BackendUnavailable


def wait_until(condition: Callable[[], object], timeout: float = 20.0) -> None:
    """Poll ``condition`` until it holds; fail the test if it does not within ``timeout``."""
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
