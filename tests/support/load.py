"""Load for the fault tests: threads acquiring and releasing while something breaks."""

from __future__ import annotations

import threading
import time
from collections import Counter
from typing import TYPE_CHECKING

from django_semaphore import BackendUnavailable, Semaphore

if TYPE_CHECKING:
    from typing_extensions import Self


class Workers:
    """Threads running ``_run(index)`` until the ``with`` block ends."""

    join_timeout = 15.0

    def __init__(self, threads: int) -> None:
        self.lock = threading.Lock()
        self.stop = threading.Event()
        self.threads = [threading.Thread(target=self._run, args=(i,), daemon=True) for i in range(threads)]

    def _run(self, index: int) -> None:
        raise NotImplementedError

    def __enter__(self) -> Self:
        for thread in self.threads:
            thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        for thread in self.threads:
            thread.join(self.join_timeout)


class Load(Workers):
    """Threads acquiring and releasing in a loop, counting every outcome.

    ``inside`` counts holders as the callers see them; ``over`` counts entries
    that found more than ``limit`` holders inside. Anything but a permit, a
    "full" answer or ``BackendUnavailable`` is recorded under ``other``.
    """

    def __init__(self, sem: Semaphore, limit: int, threads: int = 3, hold: float = 0.002) -> None:
        super().__init__(threads)
        self.sem, self.limit, self.hold = sem, limit, hold
        self.outcomes: Counter[str] = Counter()
        self.errors: list[BaseException] = []
        self.inside = 0

    def _run(self, index: int) -> None:
        while not self.stop.is_set():
            try:
                permit = self.sem.acquire(wait=0.2, auto_renew=False)
            except BackendUnavailable:
                self._count("unavailable")
                time.sleep(0.01)
                continue
            except Exception as exc:
                self.errors.append(exc)
                self._count("other")
                continue
            if permit is None:
                self._count("full")
                continue
            with self.lock:
                self.inside += 1
                self.outcomes["granted"] += 1
                if self.inside > self.limit:
                    self.outcomes["over"] += 1
            time.sleep(self.hold)
            with self.lock:
                self.inside -= 1
            try:
                permit.release()
            except BackendUnavailable:
                self._count("release unavailable")

    def _count(self, outcome: str) -> None:
        with self.lock:
            self.outcomes[outcome] += 1

    def granted(self) -> int:
        with self.lock:
            return self.outcomes["granted"]
