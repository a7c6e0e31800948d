"""A real ``celery worker`` process for the tests, stopped by its own pid (and its pool's, by theirs)."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from types import TracebackType

ROOT = Path(__file__).resolve().parents[2]
READY_TIMEOUT = 60.0
STOP_TIMEOUT = 20.0


def children(pid: int) -> list[int]:
    """The processes ``pid`` started (Linux's /proc), so none outlives a worker stopped hard."""
    try:
        return [int(child) for child in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]
    except OSError:
        return []


def started_at(pid: int) -> str | None:
    """When ``pid`` started (clock ticks since boot): tells a process from a later one given its pid."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[19]
    except (OSError, IndexError):
        return None


class CeleryWorker:
    """``celery -A tests.support.celery_app worker`` with a prefork pool, on its own queue.

    ``broker_url`` carries the broker and result backend; ``key_prefix`` is
    the test's own, so the worker's permits and the referee's counters are
    the test's. The log goes to ``log_path``, shown when a test fails.
    """

    def __init__(
        self,
        broker_url: str,
        key_prefix: str,
        queue: str,
        log_path: Path,
        concurrency: int = 4,
        *,
        python: str = sys.executable,
        app: str = "tests.support.celery_app",
    ) -> None:
        self.broker_url = broker_url
        self.key_prefix = key_prefix
        self.queue = queue
        self.log_path = log_path
        self.concurrency = concurrency
        self.python = python
        self.app = app
        self.process: subprocess.Popen[bytes] | None = None

    def start(self, cwd: Path = ROOT, env: dict[str, str] | None = None) -> CeleryWorker:
        """Start it (the suite's test app, unless ``env`` and ``cwd`` say another site's) and wait until ready."""
        env = env or {
            **os.environ,
            "DJANGO_SETTINGS_MODULE": "tests.support.celery_settings",
            "SEMAPHORE_KEY_PREFIX": self.key_prefix,
            "CELERY_BROKER_URL": self.broker_url,
            "CELERY_QUEUE": self.queue,
        }
        command = [
            self.python,
            "-m",
            "celery",
            "-A",
            self.app,
            "worker",
            "--pool=prefork",
            f"--concurrency={self.concurrency}",
            f"--queues={self.queue}",
            f"--hostname={self.queue}@%h",
            "--without-gossip",
            "--without-mingle",
            "--without-heartbeat",
            "--loglevel=INFO",
        ]
        with open(self.log_path, "ab") as log:
            self.process = subprocess.Popen(
                command, cwd=cwd, env=env, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL
            )
        deadline = time.monotonic() + READY_TIMEOUT
        while " ready." not in self.log():
            if self.process.poll() is not None or time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(f"the Celery worker did not start:\n{self.log()}")
            time.sleep(0.1)
        return self

    def log(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    def pool(self) -> list[int]:
        """The pids of the worker's pool processes."""
        return [] if self.process is None else children(self.process.pid)

    def stop(self) -> None:
        """Warm shutdown (SIGTERM: running tasks finish), then SIGKILL; idempotent."""
        if self.process is None:
            return
        pool = [(pid, started_at(pid)) for pid in self.pool()]
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=STOP_TIMEOUT)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(timeout=10)
        for pid, start in pool:  # a pool process left behind by a hard stop: ours, by its pid
            if start is not None and started_at(pid) == start:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
        self.process = None

    def __enter__(self) -> CeleryWorker:
        return self.start()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()
