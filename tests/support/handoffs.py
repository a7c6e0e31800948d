"""A permit held, and a thread in line behind it: the scene of the hand-off tests."""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import Any

from django_semaphore import Permit, Semaphore
from django_semaphore.core.conf import SemaphoreConfig

from .polling import wait_until


@dataclass
class InLine:
    """The semaphore, its holder (not renewed), the thread waiting behind it, what it got, its ``on_lost`` calls."""

    semaphore: Semaphore
    holder: Permit
    waiter: threading.Thread
    got: list[Any] = field(default_factory=list)
    lost: list[str] = field(default_factory=list)

    def hand_over(self) -> Permit:
        """The holder releases; the waiter's permit, once it has it."""
        self.holder.release()
        self.waiter.join(10)
        (permit,) = self.got
        assert permit is not None
        return permit


def in_line_behind_a_holder(name: str, lease: float = 60) -> InLine:
    def semaphore() -> Semaphore:
        return Semaphore(SemaphoreConfig.from_options(name, {"limit": 1, "lease": lease}))

    holder = semaphore().acquire(auto_renew=False)
    assert holder is not None
    scene = InLine(semaphore(), holder, threading.Thread())
    scene.waiter = threading.Thread(
        target=lambda: scene.got.append(semaphore().acquire(wait=10, on_lost=lambda _: scene.lost.append("lost")))
    )
    scene.waiter.start()
    wait_until(lambda: scene.semaphore.status().waiting == 1)
    return scene
