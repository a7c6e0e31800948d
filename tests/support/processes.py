"""The OS processes the contention tests start, and stopping them however the test ends.

``warm`` starts each one as ``multiprocessing``'s spawn did, a new process
of its own with none of the test process's threads, sockets or state, but
forked from a server process that has imported Django, redis-py and the
package once (``forkserver`` with a preload), not from a fresh interpreter:
a child is ready in a tenth of the CPU a spawned one took to import them
(about 0.1 s against 0.6 s, and the suite starts hundreds). The server
imports only what reads no setting: each child still sets Django up itself,
from the environment the test process has when it starts the child (the
server's own is that of the first start, so it is handed over).
"""

from __future__ import annotations

import atexit
import multiprocessing.context
import multiprocessing.forkserver
import os
from multiprocessing.process import BaseProcess
from typing import Any

# What a child imports anyway, and may import before Django is set up (it reads no setting on import).
PRELOAD = [
    "django.contrib.admin.sites",
    "django.contrib.auth",
    "django.db.models",
    "django.http",
    "django.template",
    "django.urls",
    "django_redis.cache",
    "django_semaphore",
    "django_semaphore.decorators",
    "django_semaphore.middleware",
    "django_semaphore.ops.overview",
    "redis.asyncio",
    "redis.cluster",
    "rest_framework",
    "sqlite3",
    "statistics",
]


class WarmProcess(multiprocessing.context.ForkServerProcess):
    """A process forked from the warmed server, with the environment of the test process as it starts it."""

    def start(self) -> None:
        self._environment = dict(os.environ)
        super().start()

    def run(self) -> None:
        os.environ.clear()
        os.environ.update(self._environment)
        super().run()


class WarmContext(multiprocessing.context.ForkServerContext):
    Process = WarmProcess  # type: ignore[assignment]


warm: Any = WarmContext()
warm.set_forkserver_preload(PRELOAD)
# The server is stopped and reaped (by its pid) when the test process exits, rather than left to stop by itself
# once its parent is gone: its children's CPU then counts in the test run's, as the spawned children's did.
atexit.register(multiprocessing.forkserver._forkserver._stop)


def run_to_the_end(processes: list[BaseProcess], timeout: float = 120.0) -> None:
    """Start them all, wait for each (at most ``timeout`` s), and kill those still running: only our own, by pid."""
    try:
        for process in processes:
            process.start()
        for process in processes:
            process.join(timeout)
    finally:
        for process in processes:
            if process.is_alive():
                process.kill()
                process.join(5)
